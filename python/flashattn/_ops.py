"""Python API layer: the torch.library custom ops flashattn::fwd, bwd, varlen_fwd, varlen_bwd.

Each op takes tensors, fills the C params struct with their data pointers and element strides
and calls libflashattn; outputs and the backward workspace come from torch's allocator, so
autograd, torch.compile and CUDA-graph capture see ordinary ops. Fake (meta) kernels give
the same shapes and strides as the real ones. No kernels and no arithmetic of attention here.
"""

import ctypes
import math

import torch

from . import _lib

Tensor = torch.Tensor

_DTYPES = {
    torch.float32: _lib.DTYPE_FP32,
    torch.float16: _lib.DTYPE_FP16,
    torch.bfloat16: _lib.DTYPE_BF16,
}
_DTYPE_NAMES = "torch.float32, torch.float16 or torch.bfloat16"

# Tests set this: every output the ops allocate is filled with NaN before the library writes it,
# so a row left unwritten shows. Off in normal use (it costs a pass over the outputs).
poison_outputs = False


# ---------------------------------------------------------------------------------------------
# Validation shared by the real and the fake kernels (so torch.compile reports the same errors).


def _check_tensor(t, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"flashattn: {name} must be a torch.Tensor, got {type(t).__name__}")


def check_qkv(q, k, v, varlen: bool) -> None:
    """Checks types, dtypes, devices, ranks, shapes and last-dim strides of q, k, v.

    Written for the host time of a short call: each property is read once, and the loops over
    the three tensors that name the offending one run only when a check has failed.
    """
    for t, n in ((q, "q"), (k, "k"), (v, "v")):
        _check_tensor(t, n)
    dtype = q.dtype
    if dtype not in _DTYPES:
        raise TypeError(f"flashattn: q has dtype {dtype}; supported are {_DTYPE_NAMES}")
    if k.dtype != dtype or v.dtype != dtype:
        for t, n in ((k, "k"), (v, "v")):
            if t.dtype != dtype:
                raise TypeError(f"flashattn: {n} has dtype {t.dtype} but q has {dtype}; q, k and v must share one dtype")
    device = q.device
    if k.device != device or v.device != device:
        for t, n in ((k, "k"), (v, "v")):
            if t.device != device:
                raise ValueError(f"flashattn: {n} is on {t.device} but q is on {device}; q, k and v must be on one device")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"flashattn: tensors on {device} are not supported (cpu or cuda)")
    qs, ks, vs = q.shape, k.shape, v.shape
    rank = 3 if varlen else 4
    if len(qs) != rank or len(ks) != rank or len(vs) != rank:
        layout = "[total, heads, head_dim]" if varlen else "[batch, seqlen, heads, head_dim]"
        for s, n in ((qs, "q"), (ks, "k"), (vs, "v")):
            if len(s) != rank:
                raise ValueError(f"flashattn: {n} must be a {rank}-d tensor {layout}, got shape {tuple(s)}")
    if not varlen and not (qs[0] == ks[0] == vs[0]):
        raise ValueError(f"flashattn: batch sizes differ: q {tuple(qs)}, k {tuple(ks)}, v {tuple(vs)}")
    if ks[:-1] != vs[:-1]:
        raise ValueError(
            f"flashattn: k and v must agree in all but the last dimension, got k {tuple(ks)} and v {tuple(vs)}"
        )
    if ks[-1] != qs[-1]:
        raise ValueError(f"flashattn: q and k must have the same head_dim, got q {tuple(qs)} and k {tuple(ks)}")
    hq, hkv = qs[-2], ks[-2]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"flashattn: the heads of q ({hq}) must be a multiple of the heads of k and v ({hkv})")
    if (q.stride(-1) != 1 and qs[-1] > 1) or (k.stride(-1) != 1 and ks[-1] > 1) or (v.stride(-1) != 1 and vs[-1] > 1):
        for t, n in ((q, "q"), (k, "k"), (v, "v")):
            if t.shape[-1] > 1 and t.stride(-1) != 1:
                raise ValueError(
                    f"flashattn: {n} must have a contiguous last dimension (stride 1), got strides {tuple(t.stride())}; "
                    f"call {n}.contiguous() or pass a view whose head_dim is innermost"
                )


def check_cu_seqlens(q, cu_q, cu_k, max_q, max_k) -> None:
    for t, n in ((cu_q, "cu_seqlens_q"), (cu_k, "cu_seqlens_k")):
        _check_tensor(t, n)
        if t.dtype != torch.int32:
            raise TypeError(f"flashattn: {n} must have dtype torch.int32, got {t.dtype}")
        if t.dim() != 1 or t.shape[0] < 1:
            raise ValueError(f"flashattn: {n} must be a 1-d tensor of batch + 1 offsets, got shape {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"flashattn: {n} is on {t.device} but q is on {q.device}")
        if t.shape[0] > 1 and t.stride(0) != 1:
            raise ValueError(f"flashattn: {n} must be contiguous")
    if cu_q.shape[0] != cu_k.shape[0]:
        raise ValueError(
            f"flashattn: cu_seqlens_q has {cu_q.shape[0]} entries but cu_seqlens_k has {cu_k.shape[0]}; both are batch + 1"
        )
    for m, n in ((max_q, "max_seqlen_q"), (max_k, "max_seqlen_k")):
        if m < 0:
            raise ValueError(f"flashattn: {n} must be >= 0, got {m}")


# ---------------------------------------------------------------------------------------------
# Allocation: outputs follow the memory order of the tensor they mirror.


def alloc_like(ref: Tensor, shape=None, dtype=None) -> Tensor:
    """An uninitialised dense tensor of `shape` (None: ref's) laid out in the stride order of `ref`.

    The last dimension stays innermost; the others are ordered as in `ref` (largest stride
    outermost, ties in index order). So an output mirrors a BSHD or a transposed BHSD input.
    """
    if ref.is_contiguous():  # the common case, without the sort
        if shape is None and dtype is None:  # a third of torch.empty's host time: no shape to parse
            return torch.empty_like(ref, memory_format=torch.contiguous_format)
        return torch.empty(ref.shape if shape is None else shape, dtype=dtype or ref.dtype, device=ref.device)
    shape = ref.shape if shape is None else shape
    n = len(shape)
    strides = ref.stride()
    outer = sorted(range(n - 1), key=lambda d: -strides[d])
    perm = outer + [n - 1]
    phys = [shape[d] for d in perm]
    t = torch.empty(phys, dtype=dtype or ref.dtype, device=ref.device)
    inv = [0] * n
    for i, d in enumerate(perm):
        inv[d] = i
    return t.permute(inv)


def grad_input(t: Tensor) -> Tensor:
    """A gradient as the library reads it: last dim contiguous and no zero (broadcast) strides."""
    if (t.shape[-1] > 1 and t.stride(-1) != 1) or any(s == 0 and d > 1 for s, d in zip(t.stride(), t.shape)):
        return t.contiguous()
    return t


# ---------------------------------------------------------------------------------------------
# Filling the C structs.


def _view(t: Tensor, varlen: bool) -> tuple:
    """The FaTensor leaves of t: data pointer, batch, row, head and dim strides."""
    s = t.stride()
    if varlen:
        return t.data_ptr(), 0, s[0], s[1], 1
    return t.data_ptr(), s[0], s[1], s[2], 1


def _device(t: Tensor):
    """(library device ordinal, stream handle) for the tensors' device."""
    if t.device.type == "cpu":
        return _lib.DEVICE_CPU, None
    if not _lib.has_cuda():
        raise RuntimeError(
            f"flashattn: got CUDA tensors but {_lib.library_path()} was built without the CUDA backend; "
            "rebuild it with nvcc on PATH (CMake option FA_CUDA=ON) or pass CPU tensors"
        )
    idx = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if _raw_stream is not None:  # the same handle without building a Stream object per call
        return idx, _raw_stream(idx)
    return idx, torch.cuda.current_stream(t.device).cuda_stream


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_FWD_SIZE = ctypes.sizeof(_lib.FaFwdParams)
_BWD_SIZE = ctypes.sizeof(_lib.FaBwdParams)


def _fwd_leaves(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det):
    """(the leaves of FaFwdParams in _lib.FWD_LAYOUT.names order, stream handle)."""
    varlen = cu_q is not None
    device, stream = _device(q)
    qs, ks = q.shape, k.shape
    if varlen:
        batch, seqlen_q, seqlen_k = cu_q.shape[0] - 1, max_q, max_k
        total_q, total_k, cu_q_ptr, cu_k_ptr = qs[0], ks[0], cu_q.data_ptr(), cu_k.data_ptr()
    else:
        batch, seqlen_q, seqlen_k = qs[0], qs[1], ks[1]
        total_q = total_k = cu_q_ptr = cu_k_ptr = 0
    threads = torch.get_num_threads() if device == _lib.DEVICE_CPU else 0
    leaves = (
        _FWD_SIZE, device, _DTYPES[q.dtype], _lib.ALGORITHM_AUTO,
        batch, seqlen_q, seqlen_k, qs[-2], ks[-2], qs[-1], v.shape[-1],
        *_view(q, varlen), *_view(k, varlen), *_view(v, varlen), *_view(out, varlen),
        lse.data_ptr(), scale, softcap, 1 if causal else 0, 1 if det else 0, wl, wr,
        cu_q_ptr, cu_k_ptr, total_q, total_k, threads, 0,
    )  # fmt: skip
    return leaves, stream


def _fill_fwd(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det):
    """(FaFwdParams of the problem, stream handle)."""
    leaves, stream = _fwd_leaves(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det)
    return _lib.FWD_LAYOUT.pack(*leaves), stream


def _bwd_params(fwd_leaves, dout, dq, dk, dv, varlen: bool):
    """FaBwdParams of a problem from its forward leaves and the four gradient tensors (no
    workspace yet)."""
    return _lib.BWD_LAYOUT.pack(
        _BWD_SIZE, 0, *fwd_leaves,
        *_view(dout, varlen), *_view(dq, varlen), *_view(dk, varlen), *_view(dv, varlen), 0, 0,
    )  # fmt: skip


def _run_fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr):
    varlen = cu_q is not None
    dv = v.shape[-1]
    out = alloc_like(q) if dv == q.shape[-1] else alloc_like(q, tuple(q.shape[:-1]) + (dv,))
    if varlen:
        lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    else:
        lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    if poison_outputs:
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
    p, stream = _fill_fwd(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, False)
    _lib.check(_lib.lib().fa_fwd(ctypes.byref(p), stream), "fa_fwd")
    return out, lse


def check_bwd(dout, q, v, out, lse, varlen: bool) -> None:
    """The backward's extra inputs must match the forward problem (the library reads them blind).
    Each property is read once; the loops that name the offending tensor run only on failure."""
    for t, n in ((dout, "dout"), (out, "out"), (lse, "lse")):
        _check_tensor(t, n)
    qs, dtype, device = q.shape, q.dtype, q.device
    o_shape = tuple(qs[:-1]) + (v.shape[-1],)
    if dout.shape != o_shape or out.shape != o_shape or dout.dtype != dtype or out.dtype != dtype \
            or dout.device != device or out.device != device:
        for t, n in ((dout, "dout"), (out, "out")):
            if tuple(t.shape) != o_shape:
                raise ValueError(f"flashattn: {n} must have shape {o_shape}, got {tuple(t.shape)}")
            if t.dtype != dtype:
                raise TypeError(f"flashattn: {n} has dtype {t.dtype} but q has {dtype}")
            if t.device != device:
                raise ValueError(f"flashattn: {n} is on {t.device} but q is on {device}")
    lse_shape = (qs[1], qs[0]) if varlen else (qs[0], qs[2], qs[1])
    if lse.shape != lse_shape or lse.dtype != torch.float32 or lse.device != device:
        raise ValueError(
            f"flashattn: lse must be a torch.float32 tensor of shape {lse_shape} on {device}, "
            f"got {lse.dtype} {tuple(lse.shape)} on {lse.device}"
        )
    if not lse.is_contiguous():
        raise ValueError("flashattn: lse must be contiguous")
    if o_shape[-1] > 1 and out.stride(-1) != 1:
        raise ValueError(f"flashattn: out must have a contiguous last dimension, got strides {tuple(out.stride())}")


def _run_bwd(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det):
    varlen = cu_q is not None
    check_bwd(dout, q, v, out, lse, varlen)
    dout = grad_input(dout)
    dq, dk, dv = alloc_like(q), alloc_like(k), alloc_like(v)
    if poison_outputs:
        for t in (dq, dk, dv):
            t.fill_(float("nan"))
    fwd_leaves, stream = _fwd_leaves(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det)
    b = _bwd_params(fwd_leaves, dout, dq, dk, dv, varlen)
    L = _lib.lib()
    nbytes = ctypes.c_size_t(0)
    _lib.check(L.fa_bwd_workspace_size(ctypes.byref(b), ctypes.byref(nbytes)), "fa_bwd_workspace_size")
    workspace = None
    if nbytes.value > 0:
        # From torch's caching allocator: stream-ordered, and captured by CUDA graphs.
        workspace = torch.empty(nbytes.value, dtype=torch.uint8, device=q.device)
        b.workspace = workspace.data_ptr()
        b.workspace_size = nbytes.value
    _lib.check(L.fa_bwd(ctypes.byref(b), stream), "fa_bwd")
    del workspace
    return dq, dk, dv


def fwd_kernel_name(q, k, v, scale=None, softcap=0.0, causal=False, window_left=-1, window_right=-1,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0) -> str:
    """Name of the kernel family the forward would run for these tensors ("cpu_flash", "sm80", ...);
    packed sequences (q, k, v [total, heads, dim]) with cu_seqlens_q/k and max_seqlen_q/k."""
    return _kernel_name("fwd", q, k, v, scale, softcap, causal, window_left, window_right,
                        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def bwd_kernel_name(q, k, v, scale=None, softcap=0.0, causal=False, window_left=-1, window_right=-1,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0) -> str:
    """Name of the kernel family the backward would run for these tensors ("cpu_flash", "sm80", ...);
    packed sequences as fwd_kernel_name."""
    return _kernel_name("bwd", q, k, v, scale, softcap, causal, window_left, window_right,
                        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def _kernel_name(op, q, k, v, scale, softcap, causal, window_left, window_right, cu_q, cu_k, max_q, max_k) -> str:
    varlen = cu_q is not None or cu_k is not None
    check_qkv(q, k, v, varlen=varlen)
    if varlen:
        check_cu_seqlens(q, cu_q, cu_k, max_q, max_k)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = alloc_like(q, tuple(q.shape[:-1]) + (v.shape[-1],))
    lse_shape = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    leaves, _ = _fwd_leaves(q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, window_left,
                            window_right, False)
    L = _lib.lib()
    if op == "fwd":
        params, can, name_of = _lib.FWD_LAYOUT.pack(*leaves), L.fa_can_implement_fwd, L.fa_fwd_kernel_name
    else:  # the gradients' views only need valid shapes: out, q, k and v stand in for them
        params = _bwd_params(leaves, out, q, k, v, varlen)
        can, name_of = L.fa_can_implement_bwd, L.fa_bwd_kernel_name
    _lib.check(can(ctypes.byref(params)), f"fa_can_implement_{op}")
    name = name_of(ctypes.byref(params))
    if name is None:
        _lib.check(_lib.INTERNAL_ERROR, f"fa_{op}_kernel_name")
    return name.decode()


# ---------------------------------------------------------------------------------------------
# flashattn::fwd / flashattn::bwd (padded BSHD batches).


@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    softcap: float,
    causal: bool,
    window_left: int,
    window_right: int,
    deterministic: bool,
) -> tuple[Tensor, Tensor]:
    """out [B, Sq, Hq, Dv] (strides in q's order) and LSE fp32 [B, Hq, Sq]."""
    check_qkv(q, k, v, varlen=False)
    return _run_fwd(q, k, v, None, None, 0, 0, scale, softcap, causal, window_left, window_right)


@fwd.register_fake
def _fwd_fake(q, k, v, scale, softcap, causal, window_left, window_right, deterministic):
    check_qkv(q, k, v, varlen=False)
    out = alloc_like(q, tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    scale: float,
    softcap: float,
    causal: bool,
    window_left: int,
    window_right: int,
    deterministic: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv laid out like q, k, v (dk, dv summed over the query heads of a GQA group)."""
    check_qkv(q, k, v, varlen=False)
    return _run_bwd(dout, q, k, v, out, lse, None, None, 0, 0, scale, softcap, causal, window_left, window_right, deterministic)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, scale, softcap, causal, window_left, window_right, deterministic):
    check_qkv(q, k, v, varlen=False)
    check_bwd(dout, q, v, out, lse, varlen=False)
    return alloc_like(q), alloc_like(k), alloc_like(v)


def _fwd_setup_context(ctx, inputs, output):
    q, k, v, scale, softcap, causal, wl, wr, det = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.args = (scale, softcap, causal, wl, wr, det)
    ctx.mark_non_differentiable(lse)
    # lse has no gradient; without this autograd would fill a zero one for every backward call.
    ctx.set_materialize_grads(False)


def _fwd_backward(ctx, dout, dlse):
    if dout is None:  # out's gradient undefined (grads are not materialized): none for the inputs
        return (None,) * 9
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = bwd(grad_input(dout), q, k, v, out, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


def _once_differentiable(backward):
    """torch.autograd.function.once_differentiable, paid for only where it guards something.

    The backward of these Functions is not itself differentiable. torch's wrapper enforces that
    (a gradient computed with create_graph=True raises when differentiated) but runs every
    backward under a no_grad context, which costs more host time than the library's own call
    setup. Without create_graph autograd runs the backward with grad mode off, so there is
    nothing to guard: the wrapper is taken only when grad mode is on.
    """
    guarded = torch.autograd.function.once_differentiable(backward)

    def wrapper(ctx, *grads):
        if torch.is_grad_enabled():
            return guarded(ctx, *grads)
        return backward(ctx, *grads)

    return wrapper


class _EagerAttention(torch.autograd.Function):
    """flashattn::fwd and its autograd without the op layer, for eager calls on plain tensors.

    The same functions run (_run_fwd, _run_bwd) with the same saved tensors; what is skipped is
    torch.library's dispatch, default filling and autograd wrapping, which cost more host time
    per call than the library itself (tens of microseconds: enough to show in the timing of a
    short sequence, where the kernel takes a few hundred).
    """

    @staticmethod
    def forward(ctx, q, k, v, scale, softcap, causal, wl, wr, det):
        out, lse = _run_fwd(q, k, v, None, None, 0, 0, scale, softcap, causal, wl, wr)
        _fwd_setup_context(ctx, (q, k, v, scale, softcap, causal, wl, wr, det), (out, lse))
        return out, lse

    @staticmethod
    @_once_differentiable
    def backward(ctx, dout, dlse):
        if dout is None:
            return (None,) * 9
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _run_bwd(dout, q, k, v, out, lse, None, None, 0, 0, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None


# Looked up once: the checks below run on every eager call.
_dispatch_stack_len = getattr(torch._C, "_len_torch_dispatch_stack", None)
_functorch_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)
_forward_ad = torch.autograd.forward_ad


def _plain_eager(*tensors) -> bool:
    """True for plain tensors outside torch.compile / export tracing, dispatch modes and
    functorch transforms: the calls that need nothing the custom op provides. (Without the
    torch internals these read, every call takes the op.)"""
    for t in tensors:
        if type(t) is not Tensor:
            return False
    if _dispatch_stack_len is None or _functorch_wrapped is None:
        return False
    if torch.compiler.is_compiling() or _dispatch_stack_len() > 0:
        return False
    for t in tensors:
        if _functorch_wrapped(t):
            return False
    return True


def _needs_grad(*tensors) -> bool:
    """Might autograd see this call: grad mode on with an input that requires grad, or a forward-AD
    level open (dual tensors need not require grad; the autograd Function then raises that it
    has no jvp, rather than dropping the tangents)?"""
    if torch.is_grad_enabled():
        for t in tensors:
            if t.requires_grad:
                return True
    return getattr(_forward_ad, "_current_level", 0) >= 0


def attention_fwd(q, k, v, scale: float, softcap: float, causal: bool, wl: int, wr: int, det: bool):
    """(out, lse) of flashattn::fwd with its autograd: the op itself when tracing or under a
    tensor subclass or mode, the direct path (_EagerAttention) for plain eager calls, and
    _run_fwd alone for those autograd does not record (inference). Callers have checked q, k
    and v (check_qkv)."""
    if _plain_eager(q, k, v):
        if not _needs_grad(q, k, v):
            return _run_fwd(q, k, v, None, None, 0, 0, scale, softcap, causal, wl, wr)
        return _EagerAttention.apply(q, k, v, scale, softcap, causal, wl, wr, det)
    return fwd(q, k, v, scale, softcap, causal, wl, wr, det)


# ---------------------------------------------------------------------------------------------
# flashattn::varlen_fwd / flashattn::varlen_bwd (packed sequences with cu_seqlens).


@torch.library.custom_op("flashattn::varlen_fwd", mutates_args=())
def varlen_fwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    scale: float,
    softcap: float,
    causal: bool,
    window_left: int,
    window_right: int,
    deterministic: bool,
) -> tuple[Tensor, Tensor]:
    """out [total_q, Hq, Dv] and LSE fp32 [Hq, total_q]."""
    check_qkv(q, k, v, varlen=True)
    check_cu_seqlens(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return _run_fwd(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, softcap, causal, window_left, window_right
    )


@varlen_fwd.register_fake
def _varlen_fwd_fake(q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det):
    check_qkv(q, k, v, varlen=True)
    check_cu_seqlens(q, cu_q, cu_k, max_q, max_k)
    out = alloc_like(q, tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("flashattn::varlen_bwd", mutates_args=())
def varlen_bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    scale: float,
    softcap: float,
    causal: bool,
    window_left: int,
    window_right: int,
    deterministic: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    check_qkv(q, k, v, varlen=True)
    check_cu_seqlens(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return _run_bwd(
        dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        scale, softcap, causal, window_left, window_right, deterministic,
    )


@varlen_bwd.register_fake
def _varlen_bwd_fake(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det):
    check_qkv(q, k, v, varlen=True)
    check_bwd(dout, q, v, out, lse, varlen=True)
    return alloc_like(q), alloc_like(k), alloc_like(v)


def _varlen_fwd_setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
    ctx.args = (max_q, max_k, scale, softcap, causal, wl, wr, det)
    ctx.mark_non_differentiable(lse)
    # lse has no gradient; without this autograd would fill a zero one for every backward call.
    ctx.set_materialize_grads(False)


def _varlen_fwd_backward(ctx, dout, dlse):
    if dout is None:
        return (None,) * 13
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = varlen_bwd(grad_input(dout), q, k, v, out, lse, cu_q, cu_k, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


varlen_fwd.register_autograd(_varlen_fwd_backward, setup_context=_varlen_fwd_setup_context)


class _EagerVarlenAttention(torch.autograd.Function):
    """flashattn::varlen_fwd and its autograd without the op layer (see _EagerAttention)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det):
        out, lse = _run_fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr)
        _varlen_fwd_setup_context(ctx, (q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det),
                                  (out, lse))
        return out, lse

    @staticmethod
    @_once_differentiable
    def backward(ctx, dout, dlse):
        if dout is None:
            return (None,) * 13
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = _run_bwd(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


def varlen_attention_fwd(q, k, v, cu_q, cu_k, max_q: int, max_k: int, scale: float, softcap: float, causal: bool,
                         wl: int, wr: int, det: bool):
    """(out, lse) of flashattn::varlen_fwd with its autograd, as attention_fwd: the direct path
    for plain eager calls, the op otherwise. Callers have checked the tensors and cu_seqlens."""
    if _plain_eager(q, k, v, cu_q, cu_k):
        if not _needs_grad(q, k, v):
            return _run_fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr)
        return _EagerVarlenAttention.apply(q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det)
    return varlen_fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, causal, wl, wr, det)


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
