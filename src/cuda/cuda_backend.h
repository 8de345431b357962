// CUDA backend: the entry points the API core calls (compiled only with FA_HAVE_CUDA).
// Receives a validated Problem whose pointers live on p.device; throws fa::Error on failure
// and never leaves a sticky CUDA error behind. No torch.
#pragma once

#include <cstddef>
#include <string>

#include "api/problem.h"

namespace fa::cuda {

int device_count();
void device_info(int device, fa_device_info* info);

// Throws NOT_SUPPORTED naming the reason when no compiled kernel serves p.
void check_supported_fwd(const Problem& p);
void check_supported_bwd(const Problem& p);
// The compiled kernels, one line a row of launch/kernel_table.h (no device needed).
std::string fwd_kernel_table();
std::string bwd_kernel_table();

// Kernel family that runs p, e.g. "sm80", "sm90".
const char* fwd_kernel_name(const Problem& p);
const char* bwd_kernel_name(const Problem& p);

void fwd(const Problem& p, void* stream);
size_t bwd_workspace_size(const Problem& p);
void bwd(const Problem& p, void* stream);

}  // namespace fa::cuda
