"""Python tests: bad input raises the documented exception with a message naming the problem.

Checked for the exception type AND the text: dtype, device, rank, shapes, strides, head dim,
scale, window, softcap, unsupported features, varlen offsets, and the raw ops.
"""

import re

import pytest
import torch

import flashattn
from flashattn import _lib


def _qkv(B=2, Sq=8, Sk=8, Hq=4, Hkv=2, D=16, Dv=16, dtype=torch.float32, device="cpu"):
    return (torch.randn(B, Sq, Hq, D, dtype=dtype, device=device),
            torch.randn(B, Sk, Hkv, D, dtype=dtype, device=device),
            torch.randn(B, Sk, Hkv, Dv, dtype=dtype, device=device))


def _raises(exc, pattern, fn, *a, **kw):
    with pytest.raises(exc, match=pattern) as info:
        fn(*a, **kw)
    assert str(info.value).startswith("flashattn"), f"message does not name the library: {info.value}"
    return info.value


def test_dtype_unsupported():
    q, k, v = (t.double() for t in _qkv())
    _raises(TypeError, r"q has dtype torch\.float64; supported are torch\.float32, torch\.float16 or torch\.bfloat16",
            flashattn.flash_attn_func, q, k, v)


def test_dtype_mismatch():
    q, k, v = _qkv()
    _raises(TypeError, r"k has dtype torch\.float16 but q has torch\.float32", flashattn.flash_attn_func, q, k.half(), v)
    _raises(TypeError, r"v has dtype torch\.bfloat16 but q has torch\.float32",
            flashattn.flash_attn_func, q, k, v.bfloat16())


def test_not_a_tensor():
    q, k, v = _qkv()
    _raises(TypeError, r"v must be a torch\.Tensor, got list", flashattn.flash_attn_func, q, k, [1.0])
    _raises(TypeError, r"q must be a torch\.Tensor, got ndarray", flashattn.attention, q.numpy(), k, v)


def test_device_mismatch():
    q, k, v = _qkv()
    _raises(ValueError, r"k is on meta but q is on cpu; q, k and v must be on one device",
            flashattn.flash_attn_func, q, k.to("meta"), v)


def test_device_unsupported():
    q, k, v = (t.to("meta") for t in _qkv())
    _raises(ValueError, r"tensors on meta are not supported", flashattn.flash_attn_func, q, k, v)


def test_rank():
    q, k, v = _qkv()
    _raises(ValueError, r"q must be a 4-d tensor \[batch, seqlen, heads, head_dim\], got shape \(8, 4, 16\)",
            flashattn.flash_attn_func, q[0], k, v)
    _raises(ValueError, r"k must be a 3-d tensor \[total, heads, head_dim\], got shape \(2, 8, 2, 16\)",
            flashattn.flash_attn_varlen_func, q[0], k, v[0], torch.tensor([0, 8], dtype=torch.int32),
            torch.tensor([0, 8], dtype=torch.int32), 8, 8)
    _raises(ValueError, r"q must be a 4-d tensor \[batch, heads, seqlen, head_dim\]",
            flashattn.attention, q[0], k, v, layout="bhsd")


def test_shapes():
    q, k, v = _qkv()
    _raises(ValueError, r"batch sizes differ", flashattn.flash_attn_func, q, k[:1], v[:1])
    _raises(ValueError, r"k and v must agree in all but the last dimension, got k \(2, 8, 2, 16\) and v \(2, 7, 2, 16\)",
            flashattn.flash_attn_func, q, k, v[:, :7])
    _raises(ValueError, r"q and k must have the same head_dim, got q \(2, 8, 4, 16\) and k \(2, 8, 2, 8\)",
            flashattn.flash_attn_func, q, k[..., :8].contiguous(), v)
    q3, k3, v3 = _qkv(Hq=3, Hkv=2)
    _raises(ValueError, r"the heads of q \(3\) must be a multiple of the heads of k and v \(2\)",
            flashattn.flash_attn_func, q3, k3, v3)
    _raises(ValueError, r"qkv must have shape \[batch, seqlen, 3, heads, head_dim\]",
            flashattn.flash_attn_qkvpacked_func, torch.randn(2, 8, 2, 4, 16))
    _raises(ValueError, r"kv must have shape \[batch, seqlen_k, 2, heads_kv, head_dim\]",
            flashattn.flash_attn_kvpacked_func, q, torch.randn(2, 8, 3, 2, 16))


def test_strides_last_dim():
    q, k, v = _qkv(D=32, Dv=32)
    _raises(ValueError, r"q must have a contiguous last dimension \(stride 1\), got strides \(1024, 128, 32, 2\)",
            flashattn.flash_attn_func, q[..., ::2], k[..., ::2], v)
    vt = v.transpose(-1, -2).contiguous().transpose(-1, -2)
    _raises(ValueError, r"v must have a contiguous last dimension", flashattn.flash_attn_func, q, k, vt)


def test_head_dim_limits():
    q, k, v = _qkv(D=264, Dv=16)
    # The library's own text (fa_last_error) comes through.
    _raises(ValueError, r"fa_fwd: head_dim: must be in \[1, 256\] \(got 264\)", flashattn.flash_attn_func, q, k, v)
    q, k, v = _qkv(D=16, Dv=300)
    _raises(ValueError, r"head_dim_v: must be in \[1, 256\] \(got 300\)", flashattn.flash_attn_func, q, k, v)
    q, k, v = _qkv(D=0, Dv=16)
    _raises(ValueError, r"head_dim: must be in \[1, 256\] \(got 0\)", flashattn.flash_attn_func, q, k, v)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_scale(bad):
    q, k, v = _qkv()
    _raises(ValueError, r"softmax_scale must be finite and > 0, got " + re.escape(str(bad)),
            flashattn.flash_attn_func, q, k, v, softmax_scale=bad)
    _raises(ValueError, r"scale must be finite and > 0", flashattn.attention, q, k, v, scale=bad)


def test_scale_type():
    q, k, v = _qkv()
    _raises(TypeError, r"softmax_scale must be a Python float or None, got Tensor",
            flashattn.flash_attn_func, q, k, v, softmax_scale=torch.tensor(0.1))


def test_scale_overflow_reaches_library():
    """A float64 scale that overflows the library's float32 is caught by the library."""
    q, k, v = _qkv()
    _raises(ValueError, r"fa_fwd: scale: must be finite and > 0", flashattn.flash_attn_func, q, k, v, softmax_scale=1e300)


def test_window_and_softcap():
    q, k, v = _qkv()
    _raises(ValueError, r"window_size sides must be >= -1 \(-1 = unbounded\), got \(-2, 0\)",
            flashattn.flash_attn_func, q, k, v, window_size=(-2, 0))
    _raises(TypeError, r"window must be a pair \(left, right\) of ints, got 3", flashattn.attention, q, k, v, window=3)
    _raises(ValueError, r"softcap must be finite and > 0 \(or 0.0 for none\), got -1.0",
            flashattn.flash_attn_func, q, k, v, softcap=-1.0)
    _raises(ValueError, r"softcap must be finite and > 0 \(or None for none\), got 0.0",
            flashattn.attention, q, k, v, softcap=0.0)
    _raises(ValueError, r"layout must be 'bshd' or 'bhsd', got 'sbhd'", flashattn.attention, q, k, v, layout="sbhd")


def test_unsupported_features():
    q, k, v = _qkv()
    e = _raises(NotImplementedError, r"dropout_p=0\.1 is not supported", flashattn.flash_attn_func, q, k, v, dropout_p=0.1)
    assert isinstance(e, RuntimeError)  # NotImplementedError is a RuntimeError
    _raises(NotImplementedError, r"alibi_slopes=.* is not supported: ALiBi",
            flashattn.flash_attn_func, q, k, v, alibi_slopes=torch.ones(4))
    cu = torch.tensor([0, 8], dtype=torch.int32)
    _raises(NotImplementedError, r"dropout_p=0\.5 is not supported",
            flashattn.flash_attn_varlen_func, q[0], k[0], v[0], cu, cu, 8, 8, dropout_p=0.5)


def test_varlen_offsets():
    q, k, v = (t[0] for t in _qkv())  # total 8
    good = torch.tensor([0, 3, 8], dtype=torch.int32)
    _raises(TypeError, r"cu_seqlens_q must have dtype torch\.int32, got torch\.int64",
            flashattn.flash_attn_varlen_func, q, k, v, good.long(), good, 5, 5)
    _raises(ValueError, r"cu_seqlens_q has 3 entries but cu_seqlens_k has 2",
            flashattn.flash_attn_varlen_func, q, k, v, good, good[:2], 5, 5)
    _raises(ValueError, r"max_seqlen_k must be >= 0, got -1",
            flashattn.flash_attn_varlen_func, q, k, v, good, good, 5, -1)
    # Contents are checked by the library (on the CPU; device offsets are the caller's).
    _raises(ValueError, r"cu_seqlens_q must be non-decreasing",
            flashattn.flash_attn_varlen_func, q, k, v, torch.tensor([0, 5, 3, 8], dtype=torch.int32),
            torch.tensor([0, 2, 4, 8], dtype=torch.int32), 5, 5)
    _raises(ValueError, r"cu_seqlens_k\[batch\] must equal the total rows \(7 != 8\)",
            flashattn.flash_attn_varlen_func, q, k, v, good, torch.tensor([0, 3, 7], dtype=torch.int32), 5, 5)
    _raises(ValueError, r"cu_seqlens_q: sequence 1 has length 5, more than seqlen_q \(4\)",
            flashattn.flash_attn_varlen_func, q, k, v, good, good, 4, 5)
    _raises(ValueError, r"cu_seqlens_q\[0\] must be 0 \(got 1\)",
            flashattn.flash_attn_varlen_func, q, k, v, torch.tensor([1, 3, 8], dtype=torch.int32), good, 5, 5)


def test_raw_bwd_op_checks_its_inputs():
    """The library reads dout/out/lse blind, so the op checks them against q and v."""
    q, k, v = _qkv()
    out, lse = torch.ops.flashattn.fwd(q, k, v, 0.25, 0.0, False, -1, -1, False)
    args = (0.25, 0.0, False, -1, -1, False)
    _raises(ValueError, r"dout must have shape \(2, 8, 4, 16\), got \(2, 7, 4, 16\)",
            torch.ops.flashattn.bwd, out[:, :7], q, k, v, out, lse, *args)
    _raises(ValueError, r"lse must be a torch\.float32 tensor of shape \(2, 4, 8\)",
            torch.ops.flashattn.bwd, out, q, k, v, out, lse[:, :2], *args)
    _raises(TypeError, r"dout has dtype torch\.float16 but q has torch\.float32",
            torch.ops.flashattn.bwd, out.half(), q, k, v, out, lse, *args)


def test_status_mapping(monkeypatch):
    """Each fa_status becomes its exception class, with fa_last_error's text."""
    monkeypatch.setattr(_lib, "last_error", lambda: "fa_fwd: something")
    for status, exc in ((_lib.INVALID_ARGUMENT, ValueError), (_lib.NOT_SUPPORTED, NotImplementedError),
                        (_lib.DEVICE_ERROR, RuntimeError), (_lib.OUT_OF_MEMORY, MemoryError),
                        (_lib.INTERNAL_ERROR, RuntimeError)):
        with pytest.raises(exc, match=r"^flashattn: fa_fwd: something$") as info:
            _lib.check(status, "fa_fwd")
        if status != _lib.INVALID_ARGUMENT:
            assert isinstance(info.value, RuntimeError) and info.value.status == status


def test_library_not_found(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHATTN_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(ImportError, match=r"FLASHATTN_LIBRARY=.*nope\.so' is not a file"):
        _lib._find()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
def test_cuda_errors():
    if not flashattn.has_cuda():
        q, k, v = _qkv(dtype=torch.bfloat16, device="cuda")
        _raises(RuntimeError, r"got CUDA tensors but .* was built without the CUDA backend",
                flashattn.flash_attn_func, q, k, v)
        return
    q, k, v = _qkv(dtype=torch.bfloat16, device="cuda")
    _raises(ValueError, r"k is on cpu but q is on cuda:0", flashattn.flash_attn_func, q, k.cpu(), v)
    # fp32 storage is a CPU feature; the GPU kernels say so.
    q, k, v = _qkv(dtype=torch.float32, device="cuda")
    _raises(NotImplementedError, r"fa_fwd: CUDA forward: ", flashattn.flash_attn_func, q, k, v)
