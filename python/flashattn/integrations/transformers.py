"""Python API layer: flashattn as a Hugging Face transformers attention implementation.

    import flashattn.integrations.transformers as fa_hf
    fa_hf.register()                     # once per process
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="fa_attention")

Registers `attention_forward` in transformers' AttentionInterface and a mask builder in its
AttentionMaskInterface that hands over the 2-d padding mask (or None), as for
flash-attention-2. Padding is handled by unpadding into the varlen op; no torch kernels here.
"""

from __future__ import annotations

import torch

from ..interface import attention, flash_attn_varlen_func

# transformers treats any implementation name containing "flash" as a flash-attn kernel to
# import from its hub, so the name is "fa_attention", not "flashattn".
NAME = "fa_attention"


def _window(sliding_window, causal: bool):
    """transformers' sliding window w keeps keys with q - w < k (<= q when causal)."""
    if sliding_window is None or sliding_window <= 0:
        return None
    w = int(sliding_window) - 1
    return (w, 0 if causal else w)


def _varlen(query, key, value, cu_q, cu_k, max_q, max_k, scale, causal, window, softcap):
    """Packed rows of one batch row (query [1, H, S, D]), as the cu_seq_lens kwargs describe."""
    q = query[0].transpose(0, 1)
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    out = flash_attn_varlen_func(
        q, k, v, cu_q.to(torch.int32), cu_k.to(torch.int32), int(max_q), int(max_k),
        softmax_scale=scale, causal=causal, window_size=window or (-1, -1), softcap=softcap or 0.0,
    )
    return out.unsqueeze(0)  # [1, S, H, Dv]


def _unpad(query, key, value, mask, scale, causal, window, softcap):
    """Runs a 2-d padding mask [B, Sk] (True = token) as varlen; padded query rows get 0."""
    B, H, Sq, D = query.shape
    Sk = key.shape[2]
    mask = mask[:, -Sk:].to(torch.bool)
    if mask.shape != (B, Sk):
        raise NotImplementedError(
            f"flashattn: a 2-d attention_mask must be [batch, kv_length] = {(B, Sk)}, got {tuple(mask.shape)}"
        )
    keep_k = mask
    keep_q = mask[:, -Sq:]  # the queries are the newest Sq positions
    len_q = keep_q.sum(1, dtype=torch.int32)
    len_k = keep_k.sum(1, dtype=torch.int32)
    cu_q = torch.nn.functional.pad(len_q.cumsum(0, dtype=torch.int32), (1, 0))
    cu_k = torch.nn.functional.pad(len_k.cumsum(0, dtype=torch.int32), (1, 0))
    idx_q = keep_q.reshape(-1).nonzero().squeeze(1)
    idx_k = keep_k.reshape(-1).nonzero().squeeze(1)
    q = query.transpose(1, 2).reshape(B * Sq, H, D)[idx_q]
    k = key.transpose(1, 2).reshape(B * Sk, key.shape[1], D)[idx_k]
    v = value.transpose(1, 2).reshape(B * Sk, value.shape[1], value.shape[3])[idx_k]
    out = flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, int(len_q.max()) if B else 0, int(len_k.max()) if B else 0,
        softmax_scale=scale, causal=causal, window_size=window or (-1, -1), softcap=softcap or 0.0,
    )
    full = out.new_zeros(B * Sq, H, value.shape[3])
    full = full.index_copy(0, idx_q, out)
    return full.view(B, Sq, H, value.shape[3])


def attention_forward(
    module,
    query,
    key,
    value,
    attention_mask,
    scaling=None,
    dropout=0.0,
    sliding_window=None,
    softcap=None,
    **kwargs,
):
    """transformers attention function: query/key/value [B, H, S, D] -> ([B, S, H, Dv], None).

    Causality comes from `is_causal` in kwargs, else module.is_causal (default True).
    attention_mask: None (no padding), or the 2-d padding mask [B, kv_length] that the mask
    builder registered by `register()` hands over (run unpadded through the varlen op; the
    rows of padded queries are 0). A 4-d mask (a custom or another implementation's mask)
    raises NotImplementedError, as do dropout > 0, position_bias and attention sinks (s_aux).
    Packed sequences given as cu_seq_lens_q/k and max_length_q/k kwargs run as varlen.
    """
    if dropout:
        raise NotImplementedError(f"flashattn: dropout={dropout} is not supported (no attention dropout); use 0.0")
    for unsupported in ("position_bias", "s_aux", "sinks"):
        if kwargs.get(unsupported) is not None:
            raise NotImplementedError(f"flashattn: the transformers kwarg {unsupported!r} is not supported")
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    is_causal = bool(is_causal)
    window = _window(sliding_window, is_causal)
    if softcap is not None and softcap <= 0:
        softcap = None

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None and attention_mask is None and query.shape[0] == 1:
        out = _varlen(query, key, value, cu_q, cu_k, kwargs["max_length_q"], kwargs["max_length_k"],
                      scaling, is_causal, window, softcap)
        return out, None

    if attention_mask is None:
        out = attention(query, key, value, causal=is_causal, scale=scaling, window=window, softcap=softcap, layout="bhsd")
        return out.transpose(1, 2), None
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2:
        return _unpad(query, key, value, attention_mask, scaling, is_causal, window, softcap), None
    raise NotImplementedError(
        "flashattn: only attention_mask=None or a 2-d padding mask is supported, got "
        + (f"a tensor of shape {tuple(attention_mask.shape)}" if isinstance(attention_mask, torch.Tensor)
           else type(attention_mask).__name__)
        + "; build the model with attn_implementation='fa_attention' after flashattn.integrations.transformers.register()"
    )


def padding_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function=None,
    attention_mask=None,
    **kwargs,
):
    """transformers mask builder: the 2-d boolean padding mask [B, kv_length], or None without padding."""
    if attention_mask is None:
        return None
    attention_mask = attention_mask[:, -kv_length:]
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


def register(name: str = NAME) -> None:
    """Registers flashattn with transformers under `name` (attention and mask interfaces)."""
    if "flash" in name:
        raise ValueError(
            f"flashattn: transformers treats an attn_implementation name containing 'flash' ({name!r}) as a "
            "flash-attn kernel to import from its hub; register under another name (default 'fa_attention')"
        )
    from transformers import AttentionInterface

    AttentionInterface.register(name, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:  # older transformers build masks per model; 4-d masks then raise
        return
    AttentionMaskInterface.register(name, padding_mask)
