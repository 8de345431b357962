// CUDA backend, sm90/: the order in which a backward CTA visits the q blocks of an unmasked
// problem, and its turn to add each dQ tile in the deterministic mode. Index maps only, host-
// callable (tests/test_tile_order.cpp checks them on the CPU).
#pragma once

#include <cstdint>

#include "common/mask.h"  // FA_HOST_DEVICE

namespace fa::cuda::sm90 {

// Unmasked problems, where every kv block sees every q block: kv block j of n_kv starts at q
// block first_qb(j) = ⌊j·n_q / n_kv⌋ and wraps, so that the kv blocks of one head, which run at
// once, add into different q blocks at any one time. In the deterministic mode the dQ tiles of a
// q block are added in the order the kv blocks reach it (their step for it ascending, a higher
// kv block first where two start together): from the last kv block starting at or before it
// down, cyclically. Each kv block then waits on the add its neighbour made a step or more
// earlier, not on a chain through every kv block of the head as in descending order.
// Callers keep n_q·n_kv below 2^31 (32-bit arithmetic: the producer warp has 24 registers).
struct RotatedQOrder {
  FA_HOST_DEVICE static bool fits(int n_q, int n_kv) { return int64_t{n_q} * n_kv < (int64_t{1} << 31); }
  FA_HOST_DEVICE static int first_qb(int kv_block, int n_q, int n_kv) { return kv_block * n_q / n_kv; }
  // The q block of step s (0 <= s < n_q) of a kv block starting at q block `first`.
  FA_HOST_DEVICE static int qb_of_step(int s, int first, int n_q) {
    const int i = s + first;
    return i < n_q ? i : i - n_q;
  }
  // The number of kv blocks that add into q block qb before kv_block does.
  FA_HOST_DEVICE static int turn(int qb, int kv_block, int n_q, int n_kv) {
    const int last = ((qb + 1) * n_kv - 1) / n_q;  // the last kv block starting at or before qb
    const int t = last - kv_block;
    return t >= 0 ? t : t + n_kv;
  }
};

}  // namespace fa::cuda::sm90
