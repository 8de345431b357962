// CUDA backend, ptx/: named CTA barriers (bar.sync / bar.arrive with an id and a thread count),
// for syncing a subset of warps (e.g. the consumer warpgroups). One instruction family; thin
// inline-asm wrappers. Callers own the ids (an enum class per kernel) and the counts.
#pragma once

namespace fa::cuda::ptx {

// bar.sync id, count;   the `count` threads (a multiple of 32) calling with `id` meet  (sm_70+)
// Orders the shared and global memory accesses of those threads (CTA scope).
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// barrier.sync id, count;   as bar.sync (which is barrier.sync.aligned: every thread meets at the
// one instruction), for threads that meet from different instructions                (sm_70+)
__device__ __forceinline__ void named_barrier_sync_unaligned(int id, int count) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// bar.arrive id, count;   signal without waiting (producer side of a bar.sync)    (sm_70+)
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

}  // namespace fa::cuda::ptx
