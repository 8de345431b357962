"""Python tests: forward and backward against the torch reference on the awkward shapes.

Each case of tests/awkward_shapes.txt is crossed with each feature (none, causal, windows,
softcap, GQA, MQA, varlen, varlen + causal), on CPU (fp32, bf16, fp16) and, with the `gpu`
marker, on CUDA (bf16, fp16), through flash_attn_func / flash_attn_varlen_func and autograd.
"""

import pytest
import torch

import flashattn
from checks import assert_close
from conftest import DEVICES
from reference import attention_ref, load_shapes, varlen_ref

SHAPES = load_shapes()

FEATURES = {
    "none": {},
    "causal": {"causal": True},
    "window": {"window": (7, 3)},
    "causal_window": {"causal": True, "window": (5, -1)},
    "softcap": {"softcap": 2.0},
    "gqa": {"heads": (4, 2)},
    "mqa": {"heads": (3, 1), "causal": True},
    "varlen": {"varlen": True},
    "varlen_causal": {"varlen": True, "causal": True, "window": (9, -1)},
}
# bf16/fp16 run fewer features on the CPU to keep the suite short; every feature runs in fp32.
LOW_FEATURES = ("causal", "window", "softcap", "gqa", "varlen_causal")

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _cases():
    for device in DEVICES:
        dev = device.values[0]
        for dname, dtype in DTYPES.items():
            if dev == "cuda" and dtype == torch.float32:
                continue  # the GPU kernels store bf16/fp16 (see test_failures for fp32 on CUDA)
            for fname in FEATURES:
                if dev == "cpu" and dtype != torch.float32 and fname not in LOW_FEATURES:
                    continue
                for shape in SHAPES:
                    yield pytest.param(dev, dtype, fname, shape, id=f"{dev}-{dname}-{fname}-{shape.name}",
                                       marks=device.marks)


def _rand(shape, dtype, device):
    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)


def _refs(fn, tensors, dout, hi, lo):
    """(out, lse, grads) of the reference in precision `hi`, and in `lo` (None for fp32 inputs)."""
    res = []
    for dt in (hi, lo):
        if dt is None:
            res.append(None)
            continue
        xs = [t.detach().to(dt).requires_grad_() for t in tensors]
        out, lse = fn(*xs, dt)
        grads = torch.autograd.grad(out, xs, dout.to(dt), allow_unused=True)
        grads = [torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads)]
        res.append((out, lse, grads))
    return res


@pytest.mark.parametrize("device,dtype,feature,shape", list(_cases()))
def test_fwd_bwd(device, dtype, feature, shape):
    f = FEATURES[feature]
    causal, window, softcap = f.get("causal", False), f.get("window"), f.get("softcap", 0.0)
    Hq, Hkv = f.get("heads", (shape.Hq, shape.Hkv))
    hi = torch.float64 if device == "cpu" else torch.float32
    lo = None if dtype == torch.float32 else dtype
    kw = dict(causal=causal, window=window, softcap=softcap)

    if f.get("varlen"):
        lens = shape.seqlens
        tq, tk = sum(a for a, _ in lens), sum(b for _, b in lens)
        cu_q = torch.tensor([0] + [sum(a for a, _ in lens[: i + 1]) for i in range(len(lens))], dtype=torch.int32)
        cu_k = torch.tensor([0] + [sum(b for _, b in lens[: i + 1]) for i in range(len(lens))], dtype=torch.int32)
        q = _rand((tq, Hq, shape.D), dtype, device)
        k = _rand((tk, Hkv, shape.D), dtype, device)
        v = _rand((tk, Hkv, shape.Dv), dtype, device)
        qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
        out, lse, s_dmask = flashattn.flash_attn_varlen_func(
            qr, kr, vr, cu_q.to(device), cu_k.to(device), shape.Sq, shape.Sk,
            causal=causal, window_size=window or (-1, -1), softcap=softcap, return_attn_probs=True)

        def ref(q_, k_, v_, dt):
            return varlen_ref(q_, k_, v_, cu_q, cu_k, dtype=dt, **kw)
    else:
        q = _rand((shape.B, shape.Sq, Hq, shape.D), dtype, device)
        k = _rand((shape.B, shape.Sk, Hkv, shape.D), dtype, device)
        v = _rand((shape.B, shape.Sk, Hkv, shape.Dv), dtype, device)
        qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
        out, lse, s_dmask = flashattn.flash_attn_func(
            qr, kr, vr, causal=causal, window_size=window or (-1, -1), softcap=softcap, return_attn_probs=True)

        def ref(q_, k_, v_, dt):
            return attention_ref(q_, k_, v_, dtype=dt, **kw)

    assert s_dmask is None
    assert out.dtype == dtype and lse.dtype == torch.float32
    dout = _rand(out.shape, dtype, device)
    grads = torch.autograd.grad(out, (qr, kr, vr), dout)
    r_hi, r_lo = _refs(ref, (q, k, v), dout, hi, lo)

    assert_close("out", out, r_hi[0], r_lo and r_lo[0], factor=2.0)
    assert_close("lse", lse, r_hi[1], r_lo and r_lo[1], factor=2.0)
    for name, g, gh, i in zip(("dq", "dk", "dv"), grads, r_hi[2], range(3)):
        assert_close(name, g, gh, r_lo and r_lo[2][i], factor=3.0, floor=1.0)
