#!/usr/bin/env python3
"""Benchmark driver: flashattn against its peers, forward and backward, in one process.

GPU: flashattn vs PyTorch SDPA's cuDNN and FLASH backends and FlexAttention (torch.compile'd),
timed with triton.testing.do_bench (median) in interleaved rounds (--rounds, 3 on CUDA: every
implementation once a round, each round and cell starting with the next one, so that none always
runs first after a cell's set-up pause; each row keeps the median of its rounds and, with more than
one, the rounds themselves as ms_rounds), next to a warmed cuBLAS bf16 8192^3 matmul (at the
start and the end of the run, and after each cell of the longest seqlen, whose rows carry it as
matmul_bf16_tflops_cell: the card's clocks fall as it warms); each row also has host_us, the
host time of one call (calls queued with no sync); a row whose host time reaches 0.8 of its
timed figure gets host_bound: true and a note (printed, and in the results file's "notes").
CPU: flashattn vs torch's CPU SDPA, timed with time.perf_counter (median).
Grid (docs: ../shared ANCHORS.md): tokens fixed (batch = tokens / seqlen), model width fixed
(heads = width / hdim), hdim x seqlen x causal; FLOPs fwd = 4*B*H*S*S*D (halved causal),
bwd = 2.5 * fwd, step = 3.5 * fwd. Backward timings cover the backward only (autograd.grad on a
kept graph); a step is forward and backward together, as in training.
--varlen: each cell packs its tokens into sequences of varied length instead (cu_seqlens; lengths
uniform in [seqlen/2, 3·seqlen/2], the last one cut to fit), FLOPs summed over the sequences,
against torch.nn.attention.varlen.varlen_attn (torch_varlen: the kernels torch picks for it).
--softcap X / --window L,R: every cell with that score softcap or sliding window (flash-attn's
window_size, −1 unbounded), rows marked with them; the peers that cannot run it are left out with
a note (SDPA: neither; torch_varlen: no softcap). A window's FLOPs count the (query, key) pairs it
leaves visible.

    PYTHONPATH=python python3 bench/bench_attn.py --device cuda --json out.json --plot out.png
    PYTHONPATH=python python3 bench/bench_attn.py --device cpu --quick
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
try:
    import flashattn
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))
    import flashattn
sys.path.insert(0, str(ROOT / "bench"))
import host_cost  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


# ---------------------------------------------------------------------------------------------
# Timing.


def _time_gpu(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def _time_cpu(fn, min_time=0.5, max_runs=25) -> float:
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_time and len(times) < max_runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def time_ms(fn, device) -> float:
    if device == "cuda":
        fn()  # compiles (FlexAttention) and autotunes outside do_bench's estimate of the call time
        torch.cuda.synchronize()
        return _time_gpu(fn)
    return _time_cpu(fn)


def host_us(fn, gpu_ms: float, budget_ms: float = 50.0, batches: int = 3) -> float:
    """Host time of one call on CUDA (bench/host_cost.py's measure, the function already warm),
    over as many calls as fit `budget_ms` of GPU time (15 to 50), in `batches` batches: the
    smallest batch mean, since a pause of the process (a garbage collection, the host's other
    work) only adds to a batch, and one such pause in a single batch of 50 calls had flagged
    cells host-bound at 1.6 times their GPU time. A cell whose host time reaches its GPU time is
    host-bound: do_bench then times the host path, not the kernels."""
    n = max(5 * batches, min(50, int(budget_ms / max(gpu_ms, 1e-3))))
    return min(host_cost.host_us(fn, n=n // batches, warmup=0) for _ in range(batches))


def time_rounds(timers, ops, rounds, device, first, notes, what) -> dict:
    """{impl: {op: [ms of each round]}}. Each op is timed for every implementation in turn, in
    `rounds` rounds, each round starting one implementation further on (and the first round at
    `first`, the cell's index), so that no implementation always runs first after the cell's set-up
    pause or last in a hot card. An implementation whose timer raises is dropped (flashattn's
    re-raises)."""
    impls = list(timers)
    samples = {impl: {} for impl in impls}
    for op in ops:
        for r in range(rounds):
            k = (first + r) % len(impls)
            for impl in impls[k:] + impls[:k]:
                if impl not in samples:  # dropped in an earlier round
                    continue
                try:
                    samples[impl].setdefault(op, []).append(time_ms(timers[impl][op], device))
                except Exception as e:
                    if impl == "flashattn":
                        raise
                    notes.append(f"{impl} {what}: {type(e).__name__}: {str(e)[:160]}")
                    del samples[impl]
    return samples


def flops(op, B, H, S, D, causal, sq_sum=None, pairs=None) -> float:
    """FLOPs of one call; sq_sum: the sum of the squared sequence lengths of a packed batch
    (default B·S²), halved under a causal mask; pairs: the (query, key) pairs a window leaves
    visible, counted as they are (window_pairs)."""
    if pairs is not None:
        f = 4.0 * H * D * pairs
    else:
        f = 4.0 * H * D * (B * S * S if sq_sum is None else sq_sum)
        if causal:
            f /= 2
    return f * {"fwd": 1.0, "bwd": 2.5, "step": 3.5}[op]  # step: forward + backward


def window_pairs(lengths, causal, window) -> int:
    """The (query, key) pairs of sequences of these lengths (as many queries as keys) that a
    sliding window (left, right; −1 unbounded) leaves visible, causal setting right to 0."""
    left, right = window
    total = 0
    for n in set(lengths):
        i = torch.arange(n, dtype=torch.int64)
        lo = (i - left).clamp(min=0) if left >= 0 else torch.zeros_like(i)
        r = 0 if causal else right
        hi = (i + r).clamp(max=n - 1) if r >= 0 else torch.full_like(i, n - 1)
        total += lengths.count(n) * int((hi - lo + 1).clamp(min=0).sum())
    return total


def matmul_tflops(device, dtype=torch.bfloat16, n=8192) -> float:
    """A warmed-up n^3 matmul: the card's practical ceiling for the results file."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    ms = time_ms(lambda: a @ b, device)
    return 2.0 * n**3 / (ms * 1e-3) / 1e12


# ---------------------------------------------------------------------------------------------
# Implementations. Each maker returns (run, inputs): the forward over fresh tensors and the
# tensors the gradients are taken for; or raises.


def _bwd_of(run, inputs):
    """A backward-only timer: the forward runs once here; each call is autograd.grad on its graph."""
    out = run()
    dout = torch.randn_like(out)

    def bwd():
        torch.autograd.grad(out, inputs, dout, retain_graph=True)

    return bwd


def _step_of(run, inputs):
    """A training-step timer: forward and backward together, as a training step calls them."""
    dout = torch.randn_like(run())

    def step():
        torch.autograd.grad(run(), inputs, dout)

    return step


# A maker takes (q, k, v, causal, feat), feat the cell's flash-attn keywords beyond causal
# (softcap, window_size; empty for none), and returns (run, the tensors the gradients are taken
# for); one that cannot run the cell raises, and the peer is left out of it.


def make_flashattn(q, k, v, causal, feat, deterministic=False):
    def run():
        return flashattn.flash_attn_func(q, k, v, causal=causal, deterministic=deterministic, **feat)

    return run, (q, k, v)


def make_flashattn_det(q, k, v, causal, feat):
    return make_flashattn(q, k, v, causal, feat, deterministic=True)


def varlen_lengths(tokens, mean, seed) -> list:
    """The sequence lengths of a --varlen cell: uniform in [mean/2, 3·mean/2] until `tokens` are
    used, the last one cut to fit (a packed batch of documents of varied length)."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = max(1, mean // 2), max(1, mean * 3 // 2)
    lengths = []
    while sum(lengths) < tokens:
        lengths.append(min(int(torch.randint(lo, hi + 1, (1,), generator=g)), tokens - sum(lengths)))
    return lengths


def varlen_impls(cu, max_len, deterministic_column, device):
    """Makers over packed [total, heads, dim] tensors of one cell (offsets cu, longest max_len);
    torch's varlen_attn runs on CUDA only."""

    def ours(deterministic):
        def maker(q, k, v, causal, feat):
            def run():
                return flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=causal,
                                                        deterministic=deterministic, **feat)

            return run, (q, k, v)

        return maker

    def torch_varlen(q, k, v, causal, feat):
        import inspect

        from torch.nn.attention.varlen import varlen_attn

        args = inspect.signature(varlen_attn).parameters
        if "softcap" in feat:
            raise NotImplementedError("varlen_attn takes no softcap")
        if "window_size" in feat:
            if "window_size" not in args:
                raise NotImplementedError("this torch's varlen_attn takes no window")
            left, right = feat["window_size"]
            kw = {"window_size": (left, 0 if causal else right)}
        else:
            kw = {"is_causal": causal} if "is_causal" in args else {"window_size": (-1, 0)} if causal else {}
        if k.shape[1] != q.shape[1]:
            kw["enable_gqa"] = True  # refused by a torch without GQA here: the peer is left out

        def run():
            return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kw)

        return run, (q, k, v)

    impls = {"flashattn": ours(False)}
    if deterministic_column:
        impls["flashattn_det"] = ours(True)
    if device == "cuda":
        impls["torch_varlen"] = torch_varlen
    return impls


def _bhsd(q, k, v):
    return [t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]


def make_sdpa(backend):
    def maker(q, k, v, causal, feat):
        from torch.nn.attention import sdpa_kernel

        if feat:
            raise NotImplementedError(f"SDPA takes no {' or '.join(feat)}")
        qh, kh, vh = _bhsd(q, k, v)

        def run():
            gqa = {"enable_gqa": True} if kh.shape[1] != qh.shape[1] else {}
            if backend is None:
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, **gqa)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, **gqa)

        return run, (qh, kh, vh)

    return maker


_FLEX = {}


def make_flex(q, k, v, causal, feat):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if "fn" not in _FLEX:
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    qh, kh, vh = _bhsd(q, k, v)
    S = qh.shape[2]
    left, right = feat.get("window_size", (-1, -1))
    right = 0 if causal else right

    def visible(b, h, qi, ki):
        ok = qi >= 0  # all true, of qi's type
        if left >= 0:
            ok = ok & (ki >= qi - left)
        if right >= 0:
            ok = ok & (ki <= qi + right)
        return ok

    mask = None
    if left >= 0 or right >= 0:
        mask = create_block_mask(visible, None, None, S, S, device=q.device)
    cap = feat.get("softcap", 0.0)
    score_mod = (lambda s, b, h, qi, ki: cap * torch.tanh(s / cap)) if cap else None

    def run():
        return _FLEX["fn"](qh, kh, vh, block_mask=mask, score_mod=score_mod)

    return run, (qh, kh, vh)


def peers_for(device):
    if device == "cpu":
        return {"sdpa_cpu": make_sdpa(None)}
    from torch.nn.attention import SDPBackend

    return {
        "sdpa_cudnn": make_sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa_flash": make_sdpa(SDPBackend.FLASH_ATTENTION),
        "flex": make_flex,
    }


# ---------------------------------------------------------------------------------------------
# The run.


def git_commit() -> str:
    if os.environ.get("FLASHATTN_COMMIT"):
        return os.environ["FLASHATTN_COMMIT"]
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return "unknown"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def run(args):
    device = args.device
    dtype = DTYPES[args.dtype]
    impls = {"flashattn": make_flashattn}
    if args.deterministic:  # the deterministic backward, as one more column
        impls["flashattn_det"] = make_flashattn_det
    peers = peers_for(device)
    if args.peers is not None:
        peers = {k: v for k, v in peers.items() if k in args.peers}
    impls.update(peers)
    if device == "cuda":
        # Each (hdim, seqlen, causal) compiles FlexAttention anew; keep dynamo from giving up.
        for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                     "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 4096)

    feat = {}  # the cells' flash-attn keywords beyond causal
    if args.softcap:
        feat["softcap"] = args.softcap
    if args.window:
        feat["window_size"] = args.window
    rows, notes = [], []
    cell = 0  # rotates the order the implementations are timed in, cell by cell
    t_start = time.perf_counter()
    for hdim in args.hdims:
        heads = args.width // hdim
        for causal in args.causal:
            for S in args.seqlens:
                B = max(1, args.tokens // S)
                gen = torch.Generator(device=device).manual_seed(S * 1009 + hdim)
                heads_kv = args.heads_kv or heads
                cell_impls, sq_sum, packed, names, shape = impls, None, {}, {}, (B, S)
                lengths = [S] * B
                if args.varlen:  # the same tokens in sequences of varied length
                    lengths = varlen_lengths(B * S, S, S * 1009 + hdim)
                    B, sq_sum, longest, shape = len(lengths), sum(n * n for n in lengths), max(lengths), (B * S,)
                    cu = torch.tensor([0] + lengths).cumsum(0).to(device=device, dtype=torch.int32)
                    packed = {"varlen": True, "max_seqlen": longest}
                    names = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest)
                    cell_impls = {name: maker for name, maker in
                                  varlen_impls(cu, longest, args.deterministic, device).items()
                                  if name.startswith("flashattn") or args.peers is None or name in args.peers}
                q, k, v = (torch.randn(*shape, h, hdim, device=device, dtype=dtype, generator=gen)
                           .requires_grad_() for h in (heads, heads_kv, heads_kv))
                pairs = None if args.window is None else window_pairs(lengths, causal, args.window)
                masked = {"window_left": args.window[0], "window_right": args.window[1]} if args.window else {}
                masked.update({"softcap": args.softcap} if args.softcap else {})
                kernels = {"fwd": flashattn.fwd_kernel_name(q, k, v, causal=causal, **masked, **names),
                           "bwd": flashattn.bwd_kernel_name(q, k, v, causal=causal, **masked, **names)}
                kernels["step"] = kernels["fwd"] + "+" + kernels["bwd"]
                ref_out = None
                first_row = len(rows)
                # Every implementation's timers first, then each op timed in interleaved rounds.
                timers = {}
                for impl, maker in cell_impls.items():
                    try:
                        fwd, inputs = maker(q, k, v, causal, feat)
                        out = fwd()
                        if device == "cuda":
                            torch.cuda.synchronize()
                        if impl == "flashattn":
                            ref_out = out.detach().float()
                        elif ref_out is not None:
                            o = out.detach().float()
                            if not impl.startswith("flashattn") and not args.varlen:
                                o = o.transpose(1, 2)  # the dense peers return BHSD
                            err = (o - ref_out).abs().max().item()
                            tol = 0.05 if dtype != torch.float32 else 1e-3
                            if not math.isfinite(err) or err > tol * max(1.0, ref_out.abs().max().item()):
                                notes.append(f"{impl} hdim={hdim} S={S} causal={causal}: max |diff| to flashattn {err:.3g}")
                        del out
                        makers = {"fwd": lambda: fwd, "bwd": lambda: _bwd_of(fwd, inputs),
                                  "step": lambda: _step_of(fwd, inputs)}
                        timers[impl] = {op: makers[op]() for op in ("fwd", "bwd", "step") if op in args.ops}
                    except Exception as e:  # a peer that cannot run a shape is left out
                        if impl == "flashattn":
                            raise
                        notes.append(f"{impl} hdim={hdim} S={S} causal={causal}: {type(e).__name__}: {str(e)[:160]}")
                samples = time_rounds(timers, args.ops, args.rounds, device, first=cell, notes=notes,
                                      what=f"hdim={hdim} S={S} causal={causal}")
                cell += 1
                for impl, by_op in samples.items():
                    for op, ms_runs in by_op.items():
                        ms = statistics.median(ms_runs)
                        tflops = flops(op, B, heads, S, hdim, causal, sq_sum, pairs) / (ms * 1e-3) / 1e12
                        row = {"op": op, "dtype": args.dtype, "hdim": hdim, "causal": causal, "seqlen": S,
                               "batch": B, "heads": heads, "impl": impl, "ms": round(ms, 5), **packed,
                               **({"softcap": args.softcap} if args.softcap else {}),
                               **({"window": list(args.window)} if args.window else {}),
                               **({"heads_kv": heads_kv} if heads_kv != heads else {}),
                               "tflops": round(tflops, 5)}
                        if len(ms_runs) > 1:
                            row["ms_rounds"] = [round(x, 5) for x in ms_runs]
                        if device == "cuda":
                            row["host_us"] = round(host_us(timers[impl][op], ms), 1)
                        if impl.startswith("flashattn"):
                            row["kernel"] = kernels[op]
                        if impl == "flashattn_det":
                            row["deterministic"] = True
                        rows.append(row)
                    print(f"  [{time.perf_counter() - t_start:6.0f} s] {impl:10s} hdim={hdim:3d} causal={int(causal)} S={S:5d} "
                          + " ".join(f"{op} {statistics.median(ms):8.3f} ms" for op, ms in by_op.items()),
                          file=sys.stderr, flush=True)
                del timers
                if device == "cuda":
                    torch.cuda.empty_cache()
                del q, k, v
                if device == "cuda" and S == max(args.seqlens):
                    # The ceiling next to the longest cells, in the card's clock state there (its
                    # clocks fall as it warms: matmul_bf16_tflops at the start of a run reads up to
                    # 15% above matmul_bf16_tflops_end).
                    mm = round(matmul_tflops("cuda"), 1)
                    for row in rows[first_row:]:
                        row["matmul_bf16_tflops_cell"] = mm
                    print(f"  [{time.perf_counter() - t_start:6.0f} s] matmul next to hdim={hdim} causal={int(causal)} "
                          f"S={S}: {mm} TFLOP/s", file=sys.stderr, flush=True)
    notes += mark_host_bound(rows)
    return rows, notes, list(dict.fromkeys(r["impl"] for r in rows))  # the columns: what ran


def mark_host_bound(rows) -> list:
    """host_bound: true on the rows whose host time reaches 0.8 of the timed figure (do_bench's
    figure there is the host path's, not the kernels'); a note for each."""
    notes = []
    for r in rows:
        if r.get("host_us", 0.0) >= 0.8 * r["ms"] * 1e3:
            r["host_bound"] = True
            notes.append(f"{r['impl']} {r['op']} hdim={r['hdim']} S={r['seqlen']} causal={r['causal']}: "
                         f"host-bound ({r['host_us']:.0f} us of host time a call, {r['ms'] * 1e3:.0f} us timed)")
    return notes


def print_table(rows, impls):
    peers = [i for i in impls if i != "flashattn"]
    key = lambda r: (r["op"], r["hdim"], r["causal"], r["seqlen"])  # noqa: E731
    by = {}
    for r in rows:
        by.setdefault(key(r), {})[r["impl"]] = r
    head = ["op", "hdim", "causal", "seqlen", "batch", "heads", "flashattn"] + peers + [f"/{p}" for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in sorted(by, key=lambda k: (k[0] != "fwd", k[1], k[2], k[3])):
        cell = by[k]
        ours = cell.get("flashattn")
        any_row = next(iter(cell.values()))
        vals = [k[0], str(k[1]), "yes" if k[2] else "no", str(k[3]), str(any_row["batch"]), str(any_row["heads"])]
        vals.append(f"{ours['tflops']:.4g}" if ours else "-")
        for p in peers:
            vals.append(f"{cell[p]['tflops']:.4g}" if p in cell else "-")
        for p in peers:
            vals.append(f"{ours['tflops'] / cell[p]['tflops']:.2f}" if ours and p in cell else "-")
        lines.append("| " + " | ".join(vals) + " |")
    print("TFLOP/s (and flashattn / peer):")
    print("\n".join(lines))


def plot(rows, impls, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hdims = sorted({r["hdim"] for r in rows})
    cols = sorted({(r["op"], r["causal"]) for r in rows}, key=lambda c: (c[0] != "fwd", c[1]))
    fig, axes = plt.subplots(len(hdims), len(cols), figsize=(4.2 * len(cols), 3.2 * len(hdims)), squeeze=False)
    for i, h in enumerate(hdims):
        for j, (op, causal) in enumerate(cols):
            ax = axes[i][j]
            for impl in impls:
                pts = sorted((r["seqlen"], r["tflops"]) for r in rows
                             if r["hdim"] == h and r["op"] == op and r["causal"] == causal and r["impl"] == impl)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{op} hdim {h} {'causal' if causal else 'non-causal'}", fontsize=9)
            ax.set_xlabel("seqlen")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="default bf16 on cuda, fp32 on cpu")
    p.add_argument("--hdims", default=None, help="comma list (default 64,128,256; cpu 64,128)")
    p.add_argument("--seqlens", default=None, help="comma list (default 512..16384; cpu 256..2048)")
    p.add_argument("--causal", default="0,1", help="comma list of 0/1")
    p.add_argument("--ops", default="fwd,bwd", help="comma list of fwd, bwd, step (forward + backward)")
    p.add_argument("--deterministic", action="store_true",
                   help="also time flashattn with deterministic=True (column flashattn_det)")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds a cell, each implementation's median kept (default 3; cpu 1)")
    p.add_argument("--tokens", type=int, default=None, help="batch * seqlen (default 16384; cpu 2048)")
    p.add_argument("--width", type=int, default=None, help="heads * hdim (default 2048; cpu 256)")
    p.add_argument("--heads-kv", type=int, default=None, help="K/V heads (GQA/MQA; default: as many as Q)")
    p.add_argument("--varlen", action="store_true",
                   help="packed sequences of varied length around each seqlen, against torch's varlen_attn")
    p.add_argument("--softcap", type=float, default=0.0, help="score softcap of every cell (default none)")
    p.add_argument("--window", default=None,
                   help="sliding window LEFT,RIGHT of every cell (flash-attn's window_size; -1 unbounded)")
    p.add_argument("--peers", default=None, help="comma list of peers to run (default all)")
    p.add_argument("--quick", action="store_true", help="a small subset of the grid")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--json", default=None, help="write the results file (ANCHORS.md format)")
    p.add_argument("--plot", default=None, help="write TFLOP/s vs seqlen to this PNG")
    a = p.parse_args(argv)
    gpu = a.device == "cuda"
    a.dtype = a.dtype or ("bf16" if gpu else "fp32")
    if a.quick:
        a.hdims = a.hdims or ("128" if gpu else "64")
        a.seqlens = a.seqlens or ("1024,4096,16384" if gpu else "256,1024")
    a.hdims = [int(x) for x in (a.hdims or ("64,128,256" if gpu else "64,128")).split(",")]
    a.seqlens = [int(x) for x in (a.seqlens or ("512,1024,2048,4096,8192,16384" if gpu else "256,512,1024,2048"))
                 .split(",")]
    a.causal = [bool(int(x)) for x in a.causal.split(",")]
    a.ops = [x for x in a.ops.split(",") if x]
    a.rounds = a.rounds or (3 if gpu else 1)
    if a.rounds < 1:
        p.error("--rounds: at least 1")
    a.tokens = a.tokens or (16384 if gpu else 2048)
    a.width = a.width or (2048 if gpu else 256)
    if a.softcap < 0:
        p.error("--softcap: 0 (none) or more")
    if a.window is not None:
        try:
            a.window = tuple(int(x) for x in a.window.split(","))
        except ValueError:
            a.window = ()
        if len(a.window) != 2 or min(a.window) < -1:
            p.error("--window: LEFT,RIGHT, each -1 (unbounded) or more")
    a.peers = None if a.peers is None else [x for x in a.peers.split(",") if x]
    return a


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    meta = {"date": datetime.date.today().isoformat(), "commit": git_commit(), "torch": torch.__version__,
            "flashattn_library": flashattn.library_path()}
    if args.device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
        meta["cudnn"] = torch.backends.cudnn.version()
        meta["matmul_bf16_tflops"] = round(matmul_tflops("cuda"), 1)
    else:
        meta["gpu"] = f"cpu: {cpu_name()} ({torch.get_num_threads()} threads)"
        meta["cpu_features"] = flashattn.cpu_features()
        meta[f"matmul_{args.dtype}_tflops"] = round(matmul_tflops("cpu", DTYPES[args.dtype], n=1024), 4)
    print(json.dumps(meta), file=sys.stderr)
    rows, notes, impls = run(args)
    if args.device == "cuda":  # the ceiling again at the end: the card's clocks drift during a run
        meta["matmul_bf16_tflops_end"] = round(matmul_tflops("cuda"), 1)
    print()
    print(f"{meta['gpu']}  torch {meta['torch']}  " + "  ".join(f"{k} {v}" for k, v in meta.items() if "matmul" in k))
    print_table(rows, impls)
    for n in notes:
        print("note:", n)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(meta, rows=rows, **({"notes": notes} if notes else {})), indent=1)
                                   + "\n")
    if args.plot:
        plot(rows, impls, args.plot)


if __name__ == "__main__":
    main()
