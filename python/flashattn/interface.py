"""Python API layer: the user-facing functions.

flash_attn_func and friends are drop-ins for flash-attn's functions of the same names (BSHD,
bottom-right causal, natural-log LSE); `attention` is the SDPA-style entry that also takes
BHSD through strides. Both call the custom ops of _ops.py (in plain eager calls, the same functions without the op
layer: _ops.attention_fwd, _ops.varlen_attention_fwd); nothing here touches the library.
"""

from __future__ import annotations

import math

import torch

from . import _ops


def _unsupported(name: str, value, why: str) -> None:
    raise NotImplementedError(f"flashattn: {name}={value!r} is not supported: {why}")


def _check_common(dropout_p, alibi_slopes) -> None:
    if dropout_p != 0.0:
        _unsupported("dropout_p", dropout_p, "flashattn implements no attention dropout; pass 0.0")
    if alibi_slopes is not None:
        _unsupported("alibi_slopes", "<tensor>", "ALiBi is not implemented yet; pass None")


def _scale(arg_name: str, scale, head_dim: int) -> float:
    if scale is None:
        return _ops.default_scale(head_dim)
    if isinstance(scale, torch.Tensor) or not isinstance(scale, (int, float)):
        raise TypeError(f"flashattn: {arg_name} must be a Python float or None, got {type(scale).__name__}")
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0.0):
        raise ValueError(f"flashattn: {arg_name} must be finite and > 0, got {scale}")
    return scale


def _window(arg_name: str, window) -> tuple[int, int]:
    if window is None:
        return -1, -1
    try:
        left, right = window
        left, right = int(left), int(right)
    except (TypeError, ValueError):
        raise TypeError(f"flashattn: {arg_name} must be a pair (left, right) of ints, got {window!r}") from None
    if left < -1 or right < -1:
        raise ValueError(f"flashattn: {arg_name} sides must be >= -1 (-1 = unbounded), got {window!r}")
    return left, right


def _softcap(arg_name: str, softcap, none_value) -> float:
    if softcap is None or softcap == none_value:
        return 0.0
    softcap = float(softcap)
    if not (math.isfinite(softcap) and softcap > 0.0):
        raise ValueError(f"flashattn: {arg_name} must be finite and > 0 (or {none_value!r} for none), got {softcap}")
    return softcap


# The GPU kernels load 16-byte vectors: head dims must be multiples of 8 elements there.
_GPU_HDIM_MULTIPLE = 8


def _pad_head_dims(q, k, v):
    """On CUDA, zero-pads D and Dv up to a multiple of 8 (as flash-attn's wrapper does).

    Zero columns in q and k leave Q K^T unchanged; the extra columns of v give extra output
    columns, cut off by the caller (so such an output is a view of a wider tensor). The
    scale must be computed from the unpadded D before this. Returns (q, k, v, Dv).
    """
    dv = v.shape[-1]
    if q.device.type != "cuda":
        return q, k, v, dv
    m = _GPU_HDIM_MULTIPLE
    pd, pv = -q.shape[-1] % m, -dv % m
    if pd:
        q = torch.nn.functional.pad(q, (0, pd))
        k = torch.nn.functional.pad(k, (0, pd))
    if pv:
        v = torch.nn.functional.pad(v, (0, pv))
    return q, k, v, dv


def _tensors(**named) -> None:
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flashattn: {name} must be a torch.Tensor, got {type(t).__name__}")


# ---------------------------------------------------------------------------------------------
# flash-attn compatible functions.


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Attention over padded batches in BSHD layout, as flash-attn's function of this name.

    q: [batch, seqlen_q, heads_q, head_dim]; k: [batch, seqlen_k, heads_kv, head_dim];
    v: [batch, seqlen_k, heads_kv, head_dim_v]; heads_q a multiple of heads_kv (GQA/MQA).
    causal is bottom-right aligned; window_size (left, right), -1 unbounded; softcap 0 = none.
    Returns out [batch, seqlen_q, heads_q, head_dim_v], or with return_attn_probs
    (out, softmax_lse [batch, heads_q, seqlen_q] fp32 natural log, None); the third item is
    flash-attn's dropout mask S_dmask, which exists only with dropout, so here it is None.
    dropout_p > 0 and alibi_slopes raise NotImplementedError.
    """
    _tensors(q=q, k=k, v=v)
    _check_common(dropout_p, alibi_slopes)
    _ops.check_qkv(q, k, v, varlen=False)
    scale = _scale("softmax_scale", softmax_scale, q.shape[-1])
    wl, wr = _window("window_size", window_size)
    cap = _softcap("softcap", softcap, 0.0)
    q, k, v, dv = _pad_head_dims(q, k, v)
    out, lse = _ops.attention_fwd(q, k, v, scale, cap, bool(causal), wl, wr, bool(deterministic))
    out = out[..., :dv] if out.shape[-1] != dv else out
    return (out, lse, None) if return_attn_probs else out


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_func on qkv [batch, seqlen, 3, heads, head_dim], read through views (no copy)."""
    _tensors(qkv=qkv)
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"flashattn: qkv must have shape [batch, seqlen, 3, heads, head_dim], got {tuple(qkv.shape)}")
    q, k, v = qkv.unbind(2)
    return flash_attn_func(
        q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs
    )


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_func with kv [batch, seqlen_k, 2, heads_kv, head_dim], read through views."""
    _tensors(q=q, kv=kv)
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError(f"flashattn: kv must have shape [batch, seqlen_k, 2, heads_kv, head_dim], got {tuple(kv.shape)}")
    k, v = kv.unbind(2)
    return flash_attn_func(
        q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs
    )


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Attention over packed variable-length sequences, as flash-attn's function of this name.

    q: [total_q, heads_q, head_dim]; k, v: [total_k, heads_kv, head_dim(_v)];
    cu_seqlens_q/k: int32 [batch + 1] offsets, non-decreasing from 0, on q's device;
    max_seqlen_q/k: the longest sequence of each. Masks apply per sequence (causal bottom-right
    within each pair of lengths). Returns out [total_q, heads_q, head_dim_v], or with
    return_attn_probs (out, softmax_lse [heads_q, total_q] fp32, None).
    """
    _tensors(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    _check_common(dropout_p, alibi_slopes)
    _ops.check_qkv(q, k, v, varlen=True)
    max_q, max_k = int(max_seqlen_q), int(max_seqlen_k)
    _ops.check_cu_seqlens(q, cu_seqlens_q, cu_seqlens_k, max_q, max_k)
    scale = _scale("softmax_scale", softmax_scale, q.shape[-1])
    wl, wr = _window("window_size", window_size)
    cap = _softcap("softcap", softcap, 0.0)
    q, k, v, dv = _pad_head_dims(q, k, v)
    out, lse = _ops.varlen_attention_fwd(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, scale, cap, bool(causal), wl, wr, bool(deterministic)
    )
    out = out[..., :dv] if out.shape[-1] != dv else out
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_varlen_func on qkv [total, 3, heads, head_dim]."""
    _tensors(qkv=qkv)
    if qkv.dim() != 4 or qkv.shape[1] != 3:
        raise ValueError(f"flashattn: qkv must have shape [total, 3, heads, head_dim], got {tuple(qkv.shape)}")
    q, k, v = qkv.unbind(1)
    return flash_attn_varlen_func(
        q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
        window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
    )


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_varlen_func with kv [total_k, 2, heads_kv, head_dim]."""
    _tensors(q=q, kv=kv)
    if kv.dim() != 4 or kv.shape[1] != 2:
        raise ValueError(f"flashattn: kv must have shape [total_k, 2, heads_kv, head_dim], got {tuple(kv.shape)}")
    k, v = kv.unbind(1)
    return flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
        window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
    )


# ---------------------------------------------------------------------------------------------
# SDPA-style entry.


def attention(
    q,
    k,
    v,
    *,
    causal=False,
    scale=None,
    window=None,
    softcap=None,
    layout="bshd",
    deterministic=False,
    return_lse=False,
):
    """Exact attention, SDPA-style keywords.

    layout "bshd": q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] -> out [B, Sq, Hq, Dv].
    layout "bhsd": q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] -> out [B, Hq, Sq, Dv],
    read through strides without a copy (the output is laid out in q's memory order).
    causal: bottom-right aligned when Sq != Sk. window: None or (left, right), -1 unbounded.
    softcap: None or c > 0. scale: None (1/sqrt(D)) or finite > 0.
    With return_lse: (out, lse) with lse fp32 [B, Hq, Sq], natural log, -inf on empty rows.
    """
    _tensors(q=q, k=k, v=v)
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"flashattn: layout must be 'bshd' or 'bhsd', got {layout!r}")
    if layout == "bhsd":
        for t, n in ((q, "q"), (k, "k"), (v, "v")):
            if t.dim() != 4:
                raise ValueError(
                    f"flashattn: {n} must be a 4-d tensor [batch, heads, seqlen, head_dim], got shape {tuple(t.shape)}"
                )
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    _ops.check_qkv(q, k, v, varlen=False)
    s = _scale("scale", scale, q.shape[-1])
    wl, wr = _window("window", window)
    cap = _softcap("softcap", softcap, None)
    q, k, v, dv = _pad_head_dims(q, k, v)
    out, lse = _ops.attention_fwd(q, k, v, s, cap, bool(causal), wl, wr, bool(deterministic))
    out = out[..., :dv] if out.shape[-1] != dv else out
    if layout == "bhsd":
        out = out.transpose(1, 2)
    return (out, lse) if return_lse else out
