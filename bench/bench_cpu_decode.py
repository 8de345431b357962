#!/usr/bin/env python3
"""CPU decoding benchmark: one new query token per sequence against a K/V cache, through the
Python package (flash_attn_func, [B, S, H, D] tensors) against PyTorch's CPU
scaled_dot_product_attention on the same tensors ([B, H, S, D] views), same thread count.
Prints the median time of each and the K/V bytes read per microsecond (GB/s).

  FLASHATTN_LIBRARY=build/src/libflashattn.so PYTHONPATH=python python3 bench/bench_cpu_decode.py
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from flashattn import flash_attn_func


def median_us(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--heads", default="32:32,32:8", help="query:kv head pairs")
    ap.add_argument("--seqlens", default="1024,8192", help="cache lengths")
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--dtypes", default="fp32,bf16")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    print("| heads q:kv | cache | dtype | flashattn us | GB/s | torch SDPA us | torch / flashattn |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for pair in args.heads.split(","):
        hq, hk = (int(x) for x in pair.split(":"))
        for sk in (int(x) for x in args.seqlens.split(",")):
            for name in args.dtypes.split(","):
                dt = dtypes[name]
                q = torch.randn(1, 1, hq, args.hdim, dtype=dt)
                k = torch.randn(1, sk, hk, args.hdim, dtype=dt)
                v = torch.randn_like(k)
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                a = median_us(lambda: flash_attn_func(q, k, v), args.reps)
                b = median_us(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=hq != hk), args.reps)
                kv_bytes = 2 * sk * hk * args.hdim * q.element_size()
                print(f"| {hq}:{hk} | {sk} | {name} | {a:.0f} | {kv_bytes / a / 1e3:.1f} | {b:.0f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
