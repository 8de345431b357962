"""Python tests: what only a GPU can show (marker `gpu`; skipped without CUDA).

CUDA-graph capture and replay of forward + backward (workspace from torch's allocator,
launches on the capturing stream), non-default streams, head-dim padding, rows whose running
maximum moves along the keys (the forward's lazy rescale), long causal backwards, and
torch.compile(mode="reduce-overhead"). The reference sweep itself runs on CUDA in test_correctness.
"""

import pytest
import torch

import flashattn
from checks import assert_close
from conftest import cuda_ready
from reference import attention_ref

_OK, _WHY = cuda_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _OK, reason=_WHY)]


def _inputs(B=2, S=300, Hq=8, Hkv=2, D=128, dtype=torch.bfloat16):
    q = torch.randn(B, S, Hq, D, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(B, S, Hkv, D, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(B, S, Hkv, D, device="cuda", dtype=dtype, requires_grad=True)
    return q, k, v


def _step(q, k, v, dout, deterministic=False):
    out = flashattn.flash_attn_func(q, k, v, causal=True, deterministic=deterministic)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    return out, dq, dk, dv


@pytest.mark.parametrize("deterministic", [False, True])
def test_cuda_graph_fwd_bwd(deterministic):
    q, k, v = _inputs()
    dout = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch's docs ask
        for _ in range(2):
            _step(q, k, v, dout, deterministic)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = _step(q, k, v, dout, deterministic)

    for _ in range(2):  # new inputs in the captured buffers, then replay
        with torch.no_grad():
            for t in (q, k, v, dout):
                t.copy_(torch.randn_like(t))
        graph.replay()
        torch.cuda.synchronize()
        eager = _step(q, k, v, dout, deterministic)
        for name, a, b in zip(("out", "dq", "dk", "dv"), static, eager):
            assert not torch.isnan(a).any(), name
            if deterministic or name == "out":
                assert torch.equal(a, b), name
            else:  # dQ by fp32 atomics: order may differ between runs
                torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def test_side_stream():
    """Launches go to torch's current stream of the tensors' device."""
    q, k, v = _inputs(S=129)
    dout = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    ref = _step(q, k, v, dout, True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = _step(q, k, v, dout, True)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for a, b in zip(ref, got):
        assert torch.equal(a, b)


def test_drawn_tiles_streams_and_graph():
    """Causal forwards draw their tiles from a counter pair per stream that each launch leaves
    zero: calls back to back, on two streams at once, and eager calls around a graph replay
    (which zeroes a pair of its own) all give the first call's output, bitwise."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 1500, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def f():
        return flashattn.flash_attn_func(q, k, v, causal=True)

    first = f()
    o_hi, _ = attention_ref(q.float(), k.float(), v.float(), causal=True, dtype=torch.float32)
    o_lo, _ = attention_ref(q, k, v, causal=True, dtype=torch.bfloat16)
    assert_close("out", first, o_hi, o_lo)
    outs = [f() for _ in range(3)]
    streams = [torch.cuda.Stream() for _ in range(2)]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(4):  # queued on both streams without a sync between them
        for s in streams:
            with torch.cuda.stream(s):
                outs.append(f())
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = f()
    for _ in range(2):
        graph.replay()
        outs.extend([static.clone(), f()])
    torch.cuda.synchronize()
    for i, o in enumerate(outs):
        assert torch.equal(o, first), f"call {i}"


def _causal_refs(q, k, v, dout):
    """The float32 and the bf16 reference of a causal call: [out, lse, dq, dk, dv] each."""
    refs = []
    for dt in (torch.float32, torch.bfloat16):
        xs = [t.detach().to(dt).requires_grad_() for t in (q, k, v)]
        o, lse = attention_ref(*xs, causal=True, dtype=dt)
        refs.append([o, lse, *torch.autograd.grad(o, xs, dout.to(dt))])
    return refs


@pytest.mark.parametrize("d,dv", [(20, 20), (72, 40), (1, 8)])
def test_head_dim_padding(d, dv):
    """D and Dv that are not multiples of 8 are zero-padded on the GPU and cut back."""
    q = torch.randn(2, 37, 4, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 41, 2, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 41, 2, dv, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert out.shape == (2, 37, 4, dv)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    hi, lo = _causal_refs(q, k, v, dout)
    for i, (name, g) in enumerate(zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads))):
        assert_close(name, g, hi[i], lo[i], factor=2.0 if i < 2 else 3.0, floor=1e-6 if i < 2 else 1.0)


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("s,causal", [(1000, False), (1000, True), (4200, False), (4200, True)])
@pytest.mark.parametrize("ramp", [-20.0, 2.0, 20.0])
def test_running_max_moves(d, s, causal, ramp):
    """Rows whose maximum rises along the keys: key j scaled by 1 + ramp·j / S, so later key blocks
    raise a row's maximum by more (ramp 20) or less (ramp 2) than the forward's lazy-rescale
    threshold, or by 1 + |ramp|·(1 − j / S) for ramp −20, the largest scores first. On the sm90
    forward: S 1000 takes the hdim-64 rows (192-row unmasked, 128-row masked), the hdim-128
    second row and the hdim-256 64-key row; 4200 keys unmasked the first rows at 128 and 256,
    masked the 192-row hdim-64 causal kernel and the second rows at 128 and 256."""
    torch.manual_seed(s + d)
    q = torch.randn(1, s, 2, d, device="cuda", dtype=torch.bfloat16)
    pos = torch.arange(s, device="cuda", dtype=torch.float32) / s
    grow = 1.0 + abs(ramp) * (pos if ramp > 0 else 1.0 - pos)
    k = (torch.randn(1, s, 2, d, device="cuda") * grow.view(1, s, 1, 1)).to(torch.bfloat16)
    v = torch.randn(1, s, 2, d, device="cuda", dtype=torch.bfloat16)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    hi = attention_ref(q.float(), k.float(), v.float(), causal=causal, dtype=torch.float32)
    lo = attention_ref(q, k, v, causal=causal, dtype=torch.bfloat16)
    assert_close("out", out, hi[0], lo[0])
    assert_close("lse", lse, hi[1], lo[1])


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("sq,sk", [(4200, 4100), (4096, 4500)])
def test_long_causal_backward(sq, sk, deterministic):
    """The backward of long causal problems at hdim 128, with GQA and Sq != Sk: from 4096 query
    rows the sm90 backward runs them on its 80-row kernel (the causal instantiation of row 0),
    below that on the 64-row one."""
    torch.manual_seed(sq + sk)
    q = torch.randn(1, sq, 4, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, sk, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, sk, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = flashattn.flash_attn_func(q, k, v, causal=True, deterministic=deterministic)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    hi, lo = _causal_refs(q, k, v, dout)
    for name, g, h, low in zip(("dq", "dk", "dv"), grads, hi[2:], lo[2:]):
        assert_close(name, g, h, low, factor=3.0, floor=1.0)


def test_compile_reduce_overhead():
    torch._dynamo.reset()
    q, k, v = _inputs(S=256)

    def f(q, k, v):
        return flashattn.attention(q, k, v, causal=True, deterministic=True).float().square().sum()

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        loss = compiled(q, k, v)
        grads = torch.autograd.grad(loss, (q, k, v))
    eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    for a, b in zip(grads, eager):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
