#!/usr/bin/env python3
"""Kernel times of one flashattn backward call on CUDA, split into its three kernels.

The grid's shape for a head dim and sequence length (16k tokens, model width 2048, as
bench_attn.py), bf16. torch.profiler over --calls calls of the backward alone (the forward runs
once, before): the preprocess (D and the zeroed dQ accumulator), the main kernel and the
postprocess (dQ rounded), each as µs a call, and any other device work of the call; then the
whole call timed by CUDA events, so that what lies between them (launches, gaps) shows as the
difference; and the device's idle time before each kernel in the profiled timeline.

    PYTHONPATH=python python3 bench/kernel_times.py --hdim 128 --seqlen 1024 --causal
"""

from __future__ import annotations

import argparse
import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import flashattn

KERNELS = (("pre", "bwd_pre_kernel"), ("post", "bwd_post_kernel"), ("main", "BwdKernel"))


def kernel_of(name: str) -> str | None:
    for short, marker in KERNELS:
        if marker in name:
            return short
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--calls", type=int, default=20)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernel_times: no CUDA device", file=sys.stderr)
        return 1
    b, h = max(1, 16384 // a.seqlen), max(1, 2048 // a.hdim)
    q, k, v = (torch.randn(b, a.seqlen, h, a.hdim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    o = flashattn.flash_attn_func(q, k, v, causal=a.causal)
    g = torch.randn_like(o)

    def backward():
        torch.autograd.grad(o, (q, k, v), g, retain_graph=True)

    for _ in range(5):
        backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.calls):
            backward()
        torch.cuda.synchronize()
    us = collections.defaultdict(float)
    names = {}
    others = collections.defaultdict(float)
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
        short = kernel_of(e.key)
        if short is not None:
            us[short] += t
            names[short] = e.key
        elif t > 0:  # any other device work of the call (copies, fills, autograd's kernels)
            others[e.key] += t
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.calls):
        backward()
    end.record()
    torch.cuda.synchronize()
    call_us = start.elapsed_time(end) * 1000 / a.calls
    print(f"hdim {a.hdim} seqlen {a.seqlen} causal {int(a.causal)} batch {b} heads {h}, "
          f"{flashattn.bwd_kernel_name(q, k, v, causal=a.causal)} backward")
    for short, _ in KERNELS:
        if short in us:
            print(f"  {short:5s} {us[short] / a.calls:9.1f} us  {names[short][:100]}")
    for key, t in sorted(others.items(), key=lambda kv: -kv[1]):
        print(f"  other {t / a.calls:9.1f} us  {key[:100]}")
    total = sum(us.values()) + sum(others.values())
    print(f"  device work {total / a.calls:7.1f} us, call {call_us:.1f} us (CUDA events)")
    # The device's idle time before each kernel: from the end of the kernel before it (the last
    # call's postprocess for a preprocess) to its start, in the profiled calls' timeline.
    kernels = sorted((e.time_range.start, e.time_range.end, kernel_of(e.name) or "other")
                     for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range)
    idle = collections.defaultdict(list)
    for (_, end_before, _), (start, _, short) in zip(kernels, kernels[1:]):
        idle[short].append(start - end_before)
    for short, gaps in idle.items():
        print(f"  idle before {short:5s} {sum(gaps) / len(gaps):7.1f} us a call (mean of {len(gaps)}), "
              f"max {max(gaps):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
