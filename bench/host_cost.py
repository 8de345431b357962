#!/usr/bin/env python3
"""Where the time of one small attention call goes: host cost against GPU time.

For one forward shape, each implementation (flashattn and SDPA's cuDNN and FLASH backends) is
timed three ways:
  host us     host time per call, 200 calls queued without a sync (what Python, the op layer
              and the library spend before the launch returns);
  do_bench ms triton.testing.do_bench median, as bench/bench_attn.py times the grid (an L2
              flush before each call, events around it: host time shows when it exceeds the
              flush's GPU time);
  graph ms    the same call captured in a CUDA graph and replayed under do_bench: GPU time alone.
For flashattn also the bare C call (fa_fwd through ctypes on a filled struct), so the Python
op layer and the library's own host work can be told apart.

    PYTHONPATH=python python3 bench/host_cost.py --seqlen 512 --hdim 128
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import flashattn  # noqa: E402
from flashattn import _lib, _ops  # noqa: E402


def host_us(fn, n=200, warmup=10) -> float:
    """Host time of one call: n calls queued with no sync between them (the GPU runs behind)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def bench_ms(fn) -> float:
    from triton.testing import do_bench

    fn()
    torch.cuda.synchronize()
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def graph_ms(fn) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up on a side stream, as capture requires
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return bench_ms(g.replay)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--grad", action="store_true", help="inputs that require grad, outside no_grad (training)")
    a = ap.parse_args()
    S, D = a.seqlen, a.hdim
    B, H = a.tokens // S, a.width // D
    flop = 4.0 * B * H * S * S * D / (2 if a.causal else 1)
    dev = "cuda"
    q, k, v = (torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    if a.grad:
        for t in (q, k, v, qh, kh, vh):
            t.requires_grad_()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend):
        def run():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=a.causal)

        return run

    impls = {
        "flashattn": lambda: flashattn.flash_attn_func(q, k, v, causal=a.causal),
        "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }
    # The bare C call: the struct filled once, fa_fwd called on it.
    out = torch.empty_like(q, requires_grad=False)
    lse = torch.empty(B, H, S, device=dev, dtype=torch.float32)
    p, stream = _ops._fill_fwd(q.detach(), k.detach(), v.detach(), out, lse, None, None, 0, 0, D**-0.5, 0.0, a.causal, -1, -1, False)
    lib = _lib.lib()
    impls["fa_fwd (C)"] = lambda: lib.fa_fwd(ctypes.byref(p), stream)

    print(f"B={B} S={S} H={H} D={D} causal={a.causal} grad={a.grad} bf16 forward, {torch.cuda.get_device_name()}")
    print(f"{'impl':<12} {'host us':>8} {'do_bench ms':>12} {'graph ms':>9} {'TFLOP/s bench':>14} {'TFLOP/s graph':>14}")
    with torch.set_grad_enabled(a.grad):
        for name, fn in impls.items():
            try:
                h = host_us(fn)
                m = bench_ms(fn)
                with torch.no_grad():  # the bare C call launches on the stream it was given: no capture
                    g = float("nan") if name.startswith("fa_fwd") else graph_ms(fn)
            except Exception as e:  # a peer that cannot run this shape
                print(f"{name:<12} failed: {type(e).__name__}: {e}")
                continue
            print(f"{name:<12} {h:8.1f} {m:12.4f} {g:9.4f} {flop / m / 1e9:14.1f} {flop / g / 1e9:14.1f}")


if __name__ == "__main__":
    main()
