#!/usr/bin/env python3
"""CPU benchmark: libflashattn's flash path against PyTorch's CPU scaled_dot_product_attention.

Both run in the same process on the same tensors (torch's [B, H, S, D] layout; the library
reads it through strides), with the same thread count. Prints a markdown table of GFLOP/s.
FLOPs: fwd = 4·B·H·Sq·Sk·D (halved for causal), bwd = 2.5 × fwd.

  python3 bench/bench_cpu.py --lib build-cpu/src/libflashattn.so --threads 2
"""
import argparse
import ctypes as C
import statistics
import time

import torch
import torch.nn.functional as F


class Tensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("batch_stride", C.c_int64), ("row_stride", C.c_int64),
                ("head_stride", C.c_int64), ("dim_stride", C.c_int64)]


class FwdParams(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("device", C.c_int32), ("dtype", C.c_int32),
                ("algorithm", C.c_int32), ("batch", C.c_int64), ("seqlen_q", C.c_int64),
                ("seqlen_k", C.c_int64), ("heads_q", C.c_int64), ("heads_kv", C.c_int64),
                ("head_dim", C.c_int64), ("head_dim_v", C.c_int64), ("q", Tensor), ("k", Tensor),
                ("v", Tensor), ("o", Tensor), ("lse", C.POINTER(C.c_float)), ("scale", C.c_float),
                ("softcap", C.c_float), ("causal", C.c_int32), ("deterministic", C.c_int32),
                ("window_left", C.c_int64), ("window_right", C.c_int64),
                ("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p), ("total_q", C.c_int64),
                ("total_k", C.c_int64), ("num_threads", C.c_int32), ("reserved0", C.c_int32)]


class BwdParams(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("reserved0", C.c_uint32), ("fwd", FwdParams),
                ("dout", Tensor), ("dq", Tensor), ("dk", Tensor), ("dv", Tensor),
                ("workspace", C.c_void_p), ("workspace_size", C.c_size_t)]


DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def view(t):
    """A torch [B, H, S, D] tensor as the library's [batch, row, head, dim] view."""
    return Tensor(t.data_ptr(), t.stride(0), t.stride(2), t.stride(1), t.stride(3))


def timeit(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="build-cpu/src/libflashattn.so")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--seqlens", default="1024,4096")
    ap.add_argument("--hdims", default="64,128")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dirs", default="fwd,bwd")
    ap.add_argument("--no-torch", action="store_true", help="time the library only")
    args = ap.parse_args()

    lib = C.CDLL(args.lib)
    lib.fa_fwd.argtypes = [C.POINTER(FwdParams), C.c_void_p]
    lib.fa_bwd.argtypes = [C.POINTER(BwdParams), C.c_void_p]
    lib.fa_last_error.restype = C.c_char_p
    lib.fa_cpu_features.restype = C.c_char_p
    lib.fa_sizeof_fwd_params.restype = C.c_size_t
    lib.fa_sizeof_bwd_params.restype = C.c_size_t
    assert lib.fa_sizeof_fwd_params() == C.sizeof(FwdParams), "fa_fwd_params layout mismatch"
    assert lib.fa_sizeof_bwd_params() == C.sizeof(BwdParams), "fa_bwd_params layout mismatch"
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {args.threads} threads, library features: "
          f"{lib.fa_cpu_features().decode()}")

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    dirs = args.dirs.split(",")
    print("| dtype | S | D | causal | dir | ours ms | torch ms | ours GFLOP/s | torch GFLOP/s | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for dname in args.dtypes.split(","):
        dt = dtypes[dname]
        for S in map(int, args.seqlens.split(",")):
            for D in map(int, args.hdims.split(",")):
                for causal in (False, True):
                    B, H = args.batch, args.heads
                    torch.manual_seed(0)
                    q, k, v, do = (torch.randn(B, H, S, D, dtype=dt) for _ in range(4))
                    o = torch.empty_like(q)
                    lse = torch.empty(B, H, S, dtype=torch.float32)
                    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
                    fp = FwdParams()
                    fp.struct_size = C.sizeof(FwdParams)
                    fp.device, fp.dtype, fp.algorithm = -1, DTYPES[dt], 1
                    fp.batch, fp.seqlen_q, fp.seqlen_k = B, S, S
                    fp.heads_q = fp.heads_kv = H
                    fp.head_dim = fp.head_dim_v = D
                    fp.q, fp.k, fp.v, fp.o = view(q), view(k), view(v), view(o)
                    fp.lse = C.cast(lse.data_ptr(), C.POINTER(C.c_float))
                    fp.scale = D ** -0.5
                    fp.causal = int(causal)
                    fp.window_left = fp.window_right = -1
                    fp.num_threads = args.threads
                    bp = BwdParams()
                    bp.struct_size = C.sizeof(BwdParams)
                    bp.fwd = fp
                    bp.dout, bp.dq, bp.dk, bp.dv = view(do), view(dq), view(dk), view(dv)

                    def ours_fwd():
                        if lib.fa_fwd(C.byref(fp), None) != 0:
                            raise RuntimeError(lib.fa_last_error().decode())

                    def ours_bwd():
                        if lib.fa_bwd(C.byref(bp), None) != 0:
                            raise RuntimeError(lib.fa_last_error().decode())

                    flops = 4 * B * H * S * S * D / (2 if causal else 1)
                    ours_fwd()  # o and lse for the backward
                    res = {}
                    if "fwd" in dirs:
                        res["fwd"] = [timeit(ours_fwd, args.reps), None]
                    if "bwd" in dirs:
                        res["bwd"] = [timeit(ours_bwd, args.reps), None]
                    if not args.no_torch:
                        tq, tk, tv = (t.clone().requires_grad_() for t in (q, k, v))
                        with torch.no_grad():
                            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        err = (o.float() - ref.float()).abs().max().item()
                        if "fwd" in res:
                            with torch.no_grad():
                                res["fwd"][1] = timeit(lambda: F.scaled_dot_product_attention(
                                    q, k, v, is_causal=causal), args.reps)
                        if "bwd" in res:
                            out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
                            res["bwd"][1] = timeit(lambda: torch.autograd.grad(
                                out, (tq, tk, tv), do, retain_graph=True), args.reps)
                            gq, gk, gv = torch.autograd.grad(out, (tq, tk, tv), do)
                            err = max(err, *((a.float() - b.float()).abs().max().item()
                                             for a, b in ((dq, gq), (dk, gk), (dv, gv))))
                        tol = 1e-3 if dt == torch.float32 else 0.1
                        if not err <= tol:
                            print(f"# WARNING: max |ours - torch| = {err:.3g} above {tol}")
                    for d in dirs:
                        fl = flops * (2.5 if d == "bwd" else 1.0)
                        ours, theirs = res[d]
                        tcol = f"{theirs * 1e3:.1f}" if theirs else "-"
                        tgf = f"{fl / theirs / 1e9:.0f}" if theirs else "-"
                        ratio = f"{theirs / ours:.2f}" if theirs else "-"
                        print(f"| {dname} | {S} | {D} | {'yes' if causal else 'no'} | {d} | "
                              f"{ours * 1e3:.1f} | {tcol} | {fl / ours / 1e9:.0f} | {tgf} | {ratio} |",
                              flush=True)


if __name__ == "__main__":
    main()
