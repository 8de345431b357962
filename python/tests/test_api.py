"""Python tests: the API surface beyond the reference sweep.

Layouts and strides (BHSD without a copy, packed qkv/kv views), return values, gradcheck,
torch.library.opcheck of the four ops, torch.compile(fullgraph=True), determinism, empty
problems, and the library-info helpers.
"""

import pytest
import torch

import flashattn
from checks import assert_close
from reference import attention_ref


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def _hi(device):
    return torch.float64 if device == "cpu" else torch.float32


def _qkv(device, B=2, Sq=17, Sk=23, Hq=4, Hkv=2, D=32, Dv=None, dtype=None, grad=True):
    dtype = dtype or _dtype(device)
    Dv = Dv or D
    q = torch.randn(B, Sq, Hq, D, device=device).to(dtype)
    k = torch.randn(B, Sk, Hkv, D, device=device).to(dtype)
    v = torch.randn(B, Sk, Hkv, Dv, device=device).to(dtype)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def test_library_info():
    assert flashattn.library_path().endswith((".so", ".so.0", ".dylib", ".dll")) or "libflashattn" in flashattn.library_path()
    assert flashattn.library_version() == "0.1.0"
    assert isinstance(flashattn.cpu_features(), str)
    kernels = flashattn.cuda_kernels()
    assert ("fwd sm80" in kernels) if flashattn.has_cuda() else kernels == ""
    assert flashattn.cuda_device_count() >= 0
    q, k, v = _qkv("cpu", grad=False)
    assert flashattn.fwd_kernel_name(q, k, v) == "cpu_flash"
    assert flashattn.bwd_kernel_name(q, k, v) == "cpu_flash"
    # Packed sequences: [total, heads, dim] with their offsets and longest lengths.
    packed = [t.reshape(-1, *t.shape[2:]) for t in (q, k, v)]
    sq, sk = q.shape[1], k.shape[1]
    cu_q, cu_k = (torch.tensor([0, n, 2 * n], dtype=torch.int32) for n in (sq, sk))
    lengths = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=sq, max_seqlen_k=sk)
    assert flashattn.fwd_kernel_name(*packed, causal=True, **lengths) == "cpu_flash"
    assert flashattn.bwd_kernel_name(*packed, **lengths) == "cpu_flash"
    with pytest.raises(TypeError, match="cu_seqlens_k must be a torch.Tensor"):
        flashattn.fwd_kernel_name(*packed, cu_seqlens_q=cu_q, max_seqlen_q=sq)


def test_bhsd_layout_no_copy(device):
    """attention(layout='bhsd') reads BHSD through strides and returns BHSD laid out like q."""
    B, H, S, D = 2, 4, 19, 32
    dtype = _dtype(device)
    q = torch.randn(B, H, S, D, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(B, 2, S + 3, D, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(B, 2, S + 3, D, device=device, dtype=dtype, requires_grad=True)
    out, lse = flashattn.attention(q, k, v, causal=True, layout="bhsd", return_lse=True)
    assert out.shape == (B, H, S, D) and out.is_contiguous()  # BHSD memory, like q
    assert lse.shape == (B, H, S)
    out2 = flashattn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    assert torch.equal(out, out2.transpose(1, 2))
    ref, ref_lse = attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True, dtype=_hi(device))
    if device == "cpu":
        assert_close("out", out.transpose(1, 2), ref)
        assert_close("lse", lse, ref_lse)
    # The gradients come back in the inputs' (BHSD) memory order too.
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert dq.shape == q.shape and dq.is_contiguous() and dk.is_contiguous() and dv.is_contiguous()


def test_strided_views(device):
    """Non-contiguous views with a contiguous last dim run as they are (a slice of a bigger tensor)."""
    dtype = _dtype(device)
    big = torch.randn(2, 40, 6, 48, device=device).to(dtype)
    q = big[:, 3:20, 1:5, :32]  # strides of `big`
    k = big[:, 10:33, 4:6, 8:40]
    v = big[:, 5:28, 0:2, 16:48]
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    ref = flashattn.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(out, ref)


def test_packed_funcs(device):
    dtype = _dtype(device)
    qkv = torch.randn(2, 17, 3, 4, 32, device=device).to(dtype).requires_grad_()
    out = flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
    q, k, v = qkv.detach().unbind(2)
    assert torch.equal(out, flashattn.flash_attn_func(q, k, v, causal=True))
    (g,) = torch.autograd.grad(out.sum(), qkv)
    assert g.shape == qkv.shape and not torch.isnan(g).any()

    kv = torch.randn(2, 23, 2, 2, 32, device=device).to(dtype).requires_grad_()
    qq = torch.randn(2, 17, 4, 32, device=device).to(dtype)
    out = flashattn.flash_attn_kvpacked_func(qq, kv, window_size=(4, 4))
    assert torch.equal(out, flashattn.flash_attn_func(qq, *kv.detach().unbind(2), window_size=(4, 4)))

    cu = torch.tensor([0, 5, 5, 17], dtype=torch.int32, device=device)
    qkv_v = torch.randn(17, 3, 4, 32, device=device).to(dtype)
    out = flashattn.flash_attn_varlen_qkvpacked_func(qkv_v, cu, 12, causal=True)
    q, k, v = qkv_v.unbind(1)
    assert torch.equal(out, flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 12, 12, causal=True))
    kv_v = torch.randn(17, 2, 2, 32, device=device).to(dtype)
    out = flashattn.flash_attn_varlen_kvpacked_func(q, kv_v, cu, cu, 12, 12)
    assert torch.equal(out, flashattn.flash_attn_varlen_func(q, *kv_v.unbind(1), cu, cu, 12, 12))


def test_default_scale_and_explicit(device):
    q, k, v = _qkv(device, grad=False)
    a = flashattn.flash_attn_func(q, k, v)
    b = flashattn.flash_attn_func(q, k, v, softmax_scale=q.shape[-1] ** -0.5)
    assert torch.equal(a, b)
    c = flashattn.attention(q, k, v, scale=0.3)
    ref, _ = attention_ref(q, k, v, scale=0.3, dtype=_hi(device))
    if device == "cpu":
        assert_close("out", c, ref)


def test_empty_problems(device):
    dtype = _dtype(device)
    # batch 0
    q, k, v = _qkv(device, B=0, grad=True, dtype=dtype)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert out.shape == (0, 17, 4, 32) and lse.shape == (0, 4, 17)
    # no keys: O = 0, LSE = -inf, gradients 0
    q, k, v = _qkv(device, Sk=0, grad=True, dtype=dtype)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.isinf(lse).all() and (lse < 0).all()
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert torch.equal(dq, torch.zeros_like(dq)) and dk.numel() == 0 and dv.numel() == 0
    # no queries
    q, k, v = _qkv(device, Sq=0, grad=True, dtype=dtype)
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert out.shape == (2, 0, 4, 32)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert torch.equal(dk, torch.zeros_like(dk)) and torch.equal(dv, torch.zeros_like(dv))


def test_causal_rows_without_keys(device):
    """Sq > Sk with a bottom-right causal mask: the first Sq - Sk rows see no key."""
    q, k, v = _qkv(device, Sq=9, Sk=4, grad=True)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert torch.equal(out[:, :5], torch.zeros_like(out[:, :5]))
    assert torch.isneginf(lse[:, :, :5]).all() and torch.isfinite(lse[:, :, 5:]).all()
    dq, _, _ = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert torch.equal(dq[:, :5], torch.zeros_like(dq[:, :5]))


def test_nan_propagates(device):
    """A NaN in K reaches every output row that sees that key, forward and backward: NaN never
    turns into a finite, wrong answer."""
    q, k, v = _qkv(device, B=1, Sq=9, Sk=11, Hq=2, Hkv=2, D=32, grad=False)
    k = k.clone()
    k[0, 4, 1, 3] = float("nan")  # key 4 of kv head 1
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert torch.isnan(out[0, :, 1]).all(), "head 1 sees the NaN key in every row"
    assert torch.isnan(lse[0, 1]).all()
    assert not torch.isnan(out[0, :, 0]).any(), "head 0 reads another kv head"
    out.float().sum().backward()
    assert torch.isnan(q.grad[0, :, 1]).any() and torch.isnan(v.grad[0, :, 1]).any()


def test_huge_window_is_unbounded(device):
    """A window side far beyond the sequence lengths (even near 2^63) hides nothing."""
    q, k, v = _qkv(device, B=1, Sq=8, Sk=5, grad=False)
    want = flashattn.flash_attn_func(q, k, v)
    for window in ((2**63 - 1, -1), (-1, 2**63 - 1), (2**62, 2**62), (8, 8)):
        got = flashattn.flash_attn_func(q, k, v, window_size=window)
        assert torch.equal(got, want), window


def test_deterministic(device):
    q, k, v = _qkv(device, Sq=64, Sk=64)
    dout = torch.randn(q.shape[:-1] + (v.shape[-1],), device=device, dtype=q.dtype)
    runs = []
    for _ in range(2):
        out = flashattn.flash_attn_func(q, k, v, causal=True, deterministic=True)
        runs.append((out,) + torch.autograd.grad(out, (q, k, v), dout))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_lse_not_differentiable():
    q, k, v = _qkv("cpu")
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert out.requires_grad and not lse.requires_grad


def test_grad_of_broadcast_dout(device):
    """out.sum() gives an expanded (stride 0) gradient: it is made dense before the library reads it."""
    q, k, v = _qkv(device)
    out = flashattn.flash_attn_func(q, k, v, deterministic=True)
    g1 = torch.autograd.grad(out.sum(), (q, k, v))
    out2 = flashattn.flash_attn_func(q, k, v, deterministic=True)
    g2 = torch.autograd.grad(out2, (q, k, v), torch.ones_like(out))
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------
# gradcheck: the library's CPU dtypes stop at fp32, so finite differences run in fp32 with a
# step and tolerances to match (the fp64 autograd comparison of test_correctness is the tight one).


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")
@pytest.mark.parametrize("feature", ["none", "causal_gqa", "window_softcap", "varlen"])
def test_gradcheck_fp32(feature):
    kw = {}
    if feature == "varlen":
        cu_q = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
        cu_k = torch.tensor([0, 4, 6, 11], dtype=torch.int32)
        q = torch.randn(8, 2, 8, requires_grad=True)
        k = torch.randn(11, 1, 8, requires_grad=True)
        v = torch.randn(11, 1, 8, requires_grad=True)

        def fn(q, k, v):
            return flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 5, causal=True)
    else:
        hk = 1 if feature == "causal_gqa" else 2
        q = torch.randn(1, 5, 2, 8, requires_grad=True)
        k = torch.randn(1, 6, hk, 8, requires_grad=True)
        v = torch.randn(1, 6, hk, 8, requires_grad=True)
        if feature == "causal_gqa":
            kw = {"causal": True}
        elif feature == "window_softcap":
            kw = {"window_size": (2, 1), "softcap": 1.5}

        def fn(q, k, v):
            return flashattn.flash_attn_func(q, k, v, **kw)

    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-2, nondet_tol=0.0, fast_mode=False)


# ---------------------------------------------------------------------------------------------
# torch.library: opcheck of the four ops, and torch.compile.


def _op_inputs(device, varlen):
    dtype = _dtype(device)
    if varlen:
        cu_q = torch.tensor([0, 5, 5, 17], dtype=torch.int32, device=device)
        cu_k = torch.tensor([0, 7, 10, 23], dtype=torch.int32, device=device)
        q = torch.randn(17, 4, 32, device=device).to(dtype).requires_grad_()
        k = torch.randn(23, 2, 32, device=device).to(dtype).requires_grad_()
        v = torch.randn(23, 2, 16, device=device).to(dtype).requires_grad_()
        return (q, k, v, cu_q, cu_k, 12, 13, 0.2, 0.0, True, -1, -1, True)
    q, k, v = _qkv(device, Dv=16)
    return (q, k, v, 0.2, 1.5, True, 7, -1, True)  # deterministic: opcheck compares reruns


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_opcheck(device, varlen):
    fwd = torch.ops.flashattn.varlen_fwd.default if varlen else torch.ops.flashattn.fwd.default
    bwd = torch.ops.flashattn.varlen_bwd.default if varlen else torch.ops.flashattn.bwd.default
    args = _op_inputs(device, varlen)
    torch.library.opcheck(fwd, args)
    q, k, v = args[:3]
    out, lse = fwd(*args)
    dout = torch.randn_like(out)
    bargs = (dout, q.detach(), k.detach(), v.detach(), out.detach(), lse) + args[3:]
    torch.library.opcheck(bwd, bargs)


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_eager_path_matches_op(device, varlen):
    """Plain eager calls skip the op layer (_ops.attention_fwd, _ops.varlen_attention_fwd): same
    outputs and gradients, bitwise, as the custom op with its registered autograd; traced calls
    take the op."""
    from flashattn import _ops

    q, k, v, *rest = _op_inputs(device, varlen=varlen)
    assert _ops._plain_eager(q, k, v)
    eager = _ops.varlen_attention_fwd if varlen else _ops.attention_fwd
    op = torch.ops.flashattn.varlen_fwd if varlen else torch.ops.flashattn.fwd
    grads = []
    for run in (lambda: eager(q, k, v, *rest), lambda: op(q, k, v, *rest)):
        out, lse = run()
        dout = torch.ones_like(out)
        grads.append((out, lse) + torch.autograd.grad(out, (q, k, v), dout))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fq = mode.from_tensor(q)
        assert not _ops._plain_eager(fq, fq, fq)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch's forward-AD module scripts a helper
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_inference_path_matches(device, varlen):
    """Calls autograd does not record (no_grad, inference_mode, inputs without requires_grad)
    skip the autograd Function: the same outputs, bitwise, and outputs that require no grad.
    An open forward-AD level still takes the Function, which refuses dual tensors."""
    import torch.autograd.forward_ad as fwAD

    from flashattn import _ops

    q, k, v, *rest = _op_inputs(device, varlen=varlen)
    eager = _ops.varlen_attention_fwd if varlen else _ops.attention_fwd
    ref_out, ref_lse = eager(q, k, v, *rest)
    assert ref_out.requires_grad
    assert not _ops._needs_grad(q.detach(), k.detach(), v.detach())
    for ctx in (torch.no_grad, torch.inference_mode):
        with ctx():
            assert not _ops._needs_grad(q, k, v)
            out, lse = eager(q, k, v, *rest)
        assert not out.requires_grad
        assert torch.equal(out, ref_out.detach()) and torch.equal(lse, ref_lse)
    out, _ = eager(q.detach(), k.detach(), v.detach(), *rest)
    assert not out.requires_grad and torch.equal(out, ref_out.detach())
    with fwAD.dual_level():
        qd = fwAD.make_dual(q.detach(), torch.randn_like(q))
        assert _ops._needs_grad(qd, k.detach(), v.detach())
        with pytest.raises(NotImplementedError, match="jvp"):
            eager(qd, k.detach(), v.detach(), *rest)


def _params_by_field(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det, device):
    """FaFwdParams filled one named field at a time: the oracle for the packed fill."""
    import ctypes

    from flashattn import _lib

    def view(t):
        s = t.stride()
        return _lib.FaTensor(t.data_ptr(), 0, s[0], s[1], 1) if cu_q is not None else \
            _lib.FaTensor(t.data_ptr(), s[0], s[1], s[2], 1)

    p = _lib.FaFwdParams()
    p.struct_size = ctypes.sizeof(p)
    p.device = device
    p.dtype = {torch.float32: _lib.DTYPE_FP32, torch.bfloat16: _lib.DTYPE_BF16}[q.dtype]
    p.algorithm = _lib.ALGORITHM_AUTO
    if cu_q is not None:
        p.batch, p.seqlen_q, p.seqlen_k = cu_q.shape[0] - 1, max_q, max_k
        p.total_q, p.total_k = q.shape[0], k.shape[0]
        p.cu_seqlens_q, p.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
    else:
        p.batch, p.seqlen_q, p.seqlen_k = q.shape[0], q.shape[1], k.shape[1]
    p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    p.q, p.k, p.v, p.o = (view(t) for t in (q, k, v, out))
    p.lse = lse.data_ptr()
    p.scale, p.softcap, p.causal, p.deterministic = scale, softcap, int(causal), int(det)
    p.window_left, p.window_right = wl, wr
    p.num_threads = torch.get_num_threads() if device == _lib.DEVICE_CPU else 0
    return p


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_params_packed_as_by_field(device, varlen):
    """The params structs are packed in one struct.pack_into (host time); every byte equals the
    struct filled field by field, forward and backward, and a value that does not fit its C
    field is refused by name."""
    import ctypes

    from flashattn import _lib, _ops

    q, k, v, *rest = _op_inputs(device, varlen=varlen)
    q, k, v = q.detach(), k.detach(), v.detach()
    if varlen:
        extra = tuple(rest[:4])
        out, lse = torch.empty_like(q), torch.empty(q.shape[1], q.shape[0], device=q.device)
    else:
        extra = (None, None, 0, 0)
        out = torch.empty_like(q).transpose(1, 2).contiguous().transpose(1, 2)  # a BHSD-ordered output
        lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device)
    args = (q, k, v, out, lse, *extra, 0.125, 30.0, True, 5, 0, True)
    packed, _ = _ops._fill_fwd(*args)
    ref = _params_by_field(*args, device=_ops._device(q)[0])
    assert bytes(packed) == bytes(ref)

    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    b = _lib.FaBwdParams()
    b.struct_size = ctypes.sizeof(b)
    b.fwd = ref
    b.dout, b.dq, b.dk, b.dv = (_lib.FaTensor(*_ops._view(t, varlen)) for t in (out, dq, dk, dv))
    leaves, _ = _ops._fwd_leaves(*args)
    assert bytes(_ops._bwd_params(leaves, out, dq, dk, dv, varlen)) == bytes(b)

    with pytest.raises(ValueError, match=r"flashattn: window_left = 36893488147419103232 does not fit"):
        _ops._fill_fwd(*args[:12], 2**65, 0, True)

    class In(ctypes.Structure):  # a layout with padding inside and between the structs
        _fields_ = [("a", ctypes.c_int32), ("b", ctypes.c_int64)]

    class Out(ctypes.Structure):
        _fields_ = [("x", ctypes.c_int32), ("inner", In), ("y", ctypes.c_int32), ("z", ctypes.c_int64)]

    layout = _lib.FlatLayout(Out)
    assert layout.names == ("x", "inner.a", "inner.b", "y", "z")
    packed = layout.pack(1, 2, 3, 4, 5)
    assert (packed.x, packed.inner.a, packed.inner.b, packed.y, packed.z) == (1, 2, 3, 4, 5)
    with pytest.raises(ValueError, match=r"flashattn: z = 1180591620717411303424 does not fit"):
        layout.pack(1, 2, 3, 4, 2**70)


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_backward_not_differentiable(device, varlen):
    """The eager backward skips torch's once_differentiable wrapper unless grad mode is on in it;
    with create_graph=True the gradient still refuses to be differentiated, and without it the
    gradients are those of the op."""
    from flashattn import _ops

    q, k, v, *rest = _op_inputs(device, varlen=varlen)
    eager = _ops.varlen_attention_fwd if varlen else _ops.attention_fwd
    out, _ = eager(q, k, v, *rest)
    dout = torch.randn_like(out)
    (dq,) = torch.autograd.grad(out, (q,), dout.requires_grad_(), create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dq.sum().backward()
    op = torch.ops.flashattn.varlen_fwd if varlen else torch.ops.flashattn.fwd
    dout = dout.detach()
    ref = torch.autograd.grad(op(q, k, v, *rest)[0], (q, k, v), dout)
    got = torch.autograd.grad(eager(q, k, v, *rest)[0], (q, k, v), dout)
    for a, b in zip(got, ref):
        assert not a.requires_grad and torch.equal(a, b)


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_lse_grad_not_materialized(device, varlen, monkeypatch):
    """lse has no gradient, and autograd does not fill a zero one for every backward call
    (set_materialize_grads(False)): the eager backward gets None for it. An out whose
    gradient is cut downstream leaves the inputs without one, on both paths."""
    from flashattn import _ops

    class Cut(torch.autograd.Function):  # x passed through, its gradient cut
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return None

    cls = _ops._EagerVarlenAttention if varlen else _ops._EagerAttention
    body, seen = cls.backward, []

    def spy(ctx, dout, dlse):
        seen.append(dlse)
        return body(ctx, dout, dlse)

    monkeypatch.setattr(cls, "backward", staticmethod(spy))
    q, k, v, *rest = _op_inputs(device, varlen=varlen)
    out, _ = (_ops.varlen_attention_fwd if varlen else _ops.attention_fwd)(q, k, v, *rest)
    (dq,) = torch.autograd.grad(out, (q,), torch.ones_like(out))
    assert seen == [None] and dq.shape == q.shape
    op = torch.ops.flashattn.varlen_fwd if varlen else torch.ops.flashattn.fwd
    for fwd in ((_ops.varlen_attention_fwd if varlen else _ops.attention_fwd), op):
        Cut.apply(fwd(q, k, v, *rest)[0]).sum().backward()
        assert q.grad is None and k.grad is None and v.grad is None


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # torch's batching fallback
def test_vmap_takes_the_op(device, monkeypatch):
    """Under torch.func.vmap the inputs are functorch-wrapped: the eager path must decline them,
    so the op (with torch's batching fallback) runs, and each slice equals a call of its own."""
    from flashattn import _ops

    q = torch.randn(3, 1, 9, 2, 16, device=device).to(_dtype(device))
    assert _ops._plain_eager(q, q, q)
    seen = []
    real = _ops._plain_eager

    def spy(*t):
        seen.append(real(*t))
        return seen[-1]

    monkeypatch.setattr(_ops, "_plain_eager", spy)
    out = torch.func.vmap(lambda a: flashattn.flash_attn_func(a, a, a, causal=True))(q)
    assert seen == [False]
    for i in range(q.shape[0]):
        assert torch.equal(out[i], flashattn.flash_attn_func(q[i], q[i], q[i], causal=True))


def test_fake_strides_match_real():
    """The fake kernels give the same shapes and strides as the real ones (BHSD-ordered q)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    q = torch.randn(2, 4, 9, 32).transpose(1, 2)
    k = torch.randn(2, 2, 11, 32).transpose(1, 2)
    v = torch.randn(2, 2, 11, 16).transpose(1, 2)
    out, lse = torch.ops.flashattn.fwd(q, k, v, 0.1, 0.0, False, -1, -1, False)
    dout = torch.randn_like(out)
    grads = torch.ops.flashattn.bwd(dout, q, k, v, out, lse, 0.1, 0.0, False, -1, -1, False)
    mode = FakeTensorMode()
    fq, fk, fv, fdout = (mode.from_tensor(t) for t in (q, k, v, dout))
    with mode:
        fout, flse = torch.ops.flashattn.fwd(fq, fk, fv, 0.1, 0.0, False, -1, -1, False)
        fgrads = torch.ops.flashattn.bwd(fdout, fq, fk, fv, fout, flse, 0.1, 0.0, False, -1, -1, False)
    for real, fake in zip((out, lse) + tuple(grads), (fout, flse) + tuple(fgrads)):
        assert real.shape == fake.shape and real.stride() == fake.stride() and real.dtype == fake.dtype


def _inductor_works():
    try:
        torch.compile(lambda x: x * 2 + 1, fullgraph=True)(torch.ones(4))
        return True, ""
    except Exception as e:  # no C++ compiler, or a broken toolchain
        return False, f"inductor cannot compile on this machine: {type(e).__name__}: {str(e)[:200]}"


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph(device, backend):
    if backend == "inductor":
        ok, why = _inductor_works()
        if not ok:
            pytest.skip(why)
    torch._dynamo.reset()
    q, k, v = _qkv(device, B=1, Sq=33, Sk=33)
    cu = torch.tensor([0, 10, 33], dtype=torch.int32, device=device)

    def f(q, k, v):
        a = flashattn.flash_attn_func(q, k, v, causal=True, window_size=(8, -1), deterministic=True)
        b = flashattn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), layout="bhsd", softcap=3.0,
                                deterministic=True)
        c = flashattn.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 23, 23, causal=True, deterministic=True)
        return (a.float().square().sum() + b.float().sum() + (c.float() * 0.5).sum())

    compiled = torch.compile(f, fullgraph=True, backend=backend)
    loss_c = compiled(q, k, v)
    g_c = torch.autograd.grad(loss_c, (q, k, v))
    loss_e = f(q, k, v)
    g_e = torch.autograd.grad(loss_e, (q, k, v))
    # The same kernels run either way; the losses' reductions may be fused in another order.
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-4, atol=1e-4)
    tol = dict(rtol=1e-5, atol=1e-5) if device == "cpu" else dict(rtol=2e-2, atol=2e-2)
    for a, b in zip(g_c, g_e):
        torch.testing.assert_close(a, b, **tol)


def test_source_tree_discovery(tmp_path):
    """Without FLASHATTN_LIBRARY, a source tree finds <repo>/build*/src/libflashattn.so, newest
    first, build/ before the others, sanitizer folders skipped."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    pkg = Path(flashattn.__file__).resolve().parent
    shutil.copytree(pkg, tmp_path / "python" / "flashattn", ignore=shutil.ignore_patterns("lib", "__pycache__"))
    real = Path(flashattn.library_path()).resolve()
    for folder, content in (("build-asan", None), ("build-old", real), ("build-new", real)):
        (tmp_path / folder / "src").mkdir(parents=True)
        target = tmp_path / folder / "src" / "libflashattn.so"
        if content is None:
            target.write_bytes(b"not a library")  # would abort the import if it were tried
        else:
            shutil.copyfile(content, target)
    os.utime(tmp_path / "build-old" / "src" / "libflashattn.so", (1, 1))
    env = {k: v for k, v in os.environ.items() if k not in ("FLASHATTN_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(tmp_path / "python")

    def found():
        out = subprocess.run([sys.executable, "-c", "import flashattn; print(flashattn.library_path())"],
                             env=env, cwd=tmp_path, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return Path(out.stdout.strip()).parent.parent.name

    os.utime(tmp_path / "build-asan" / "src" / "libflashattn.so")  # the newest, yet skipped
    assert found() == "build-new"
    (tmp_path / "build" / "src").mkdir(parents=True)
    shutil.copyfile(real, tmp_path / "build" / "src" / "libflashattn.so")
    os.utime(tmp_path / "build" / "src" / "libflashattn.so", (1, 1))  # the oldest, yet first
    assert found() == "build"
