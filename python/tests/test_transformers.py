"""Python tests: flashattn as a transformers attention implementation.

Tiny randomly initialised models built from configs (no downloads): logits with
attn_implementation="fa_attention" match "eager" without a mask, with a left-padding mask
(on the real tokens), with sliding windows (Mistral) and logit softcapping (Gemma 2), and
greedy generation with a KV cache gives the same tokens.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

import flashattn.integrations.transformers as fa_hf  # noqa: E402
from conftest import DEVICES  # noqa: E402

fa_hf.register()
NAME = fa_hf.NAME


def _model(kind, device, **over):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)  # the same weights each time; the inputs stay fresh
        return _build(kind, device, **over)


def _build(kind, device, **over):
    common = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=2, vocab_size=128)
    if kind == "llama":
        cfg, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    elif kind == "mistral":
        cfg, cls = transformers.MistralConfig(sliding_window=8, **common), transformers.MistralForCausalLM
    elif kind == "gemma2":
        cfg = transformers.Gemma2Config(head_dim=16, sliding_window=8, attn_logit_softcapping=1.0,
                                        query_pre_attn_scalar=16, **common)
        cls = transformers.Gemma2ForCausalLM
    for key, val in over.items():
        setattr(cfg, key, val)
    model = cls(cfg).eval().to(device)
    if device == "cuda":
        model = model.to(torch.bfloat16)  # the GPU kernels store bf16/fp16
    return model


def _logits(model, impl, ids, mask=None):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits.float()


def _compare(model, ids, mask, device):
    keep = mask.bool() if mask is not None else torch.ones_like(ids, dtype=torch.bool)
    ours = _logits(model, NAME, ids, mask)[keep]
    eager = _logits(model, "eager", ids, mask)[keep]
    if device == "cpu":
        torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-4)
    else:
        # DESIGN.md's rule: ref_hi = eager in fp32 on the same bf16 weights, ref_low = eager in bf16.
        hi = _logits(model.float(), "eager", ids, mask)[keep]
        model.to(torch.bfloat16)
        err, err_low = (ours - hi).abs().max().item(), (eager - hi).abs().max().item()
        atol = torch.finfo(torch.bfloat16).eps * hi.abs().max().item()
        assert err <= 2 * err_low + atol, f"logits: {err:.3e} > 2*{err_low:.3e} + {atol:.3e}"


def test_register_rejects_flash_names():
    with pytest.raises(ValueError, match=r"name containing 'flash' \('flashattn'\)"):
        fa_hf.register("flashattn")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma2"])
def test_logits_match_eager(kind, device):
    model = _model(kind, device)
    ids = torch.randint(0, 128, (2, 24), device=device)
    _compare(model, ids, None, device)
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding
    _compare(model, ids, mask, device)


def test_sliding_window_is_applied():
    """The Mistral comparison is not vacuous: without its window the logits differ."""
    ids = torch.randint(0, 128, (1, 24))
    with_window = _logits(_model("mistral", "cpu"), NAME, ids)
    without = _logits(_model("mistral", "cpu", sliding_window=None), NAME, ids)
    assert (with_window - without).abs().max() > 1e-3


@pytest.mark.parametrize("device", DEVICES)
def test_generate_matches_eager(device):
    model = _model("llama", device)
    ids = torch.randint(0, 128, (2, 11), device=device)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    out = {}
    for impl in ("eager", NAME):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            out[impl] = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    if device == "cpu":
        assert torch.equal(out["eager"], out[NAME])
    else:  # bf16 argmax ties may flip; the prompts and most tokens must agree
        assert (out["eager"] == out[NAME]).float().mean() > 0.9


def test_unsupported_inputs():
    q = torch.randn(1, 4, 8, 16)
    k = torch.randn(1, 2, 8, 16)
    module = torch.nn.Module()
    with pytest.raises(NotImplementedError, match=r"dropout=0\.1 is not supported"):
        fa_hf.attention_forward(module, q, k, k, None, dropout=0.1)
    with pytest.raises(NotImplementedError, match=r"only attention_mask=None or a 2-d padding mask .* shape \(1, 1, 8, 8\)"):
        fa_hf.attention_forward(module, q, k, k, torch.zeros(1, 1, 8, 8))
    with pytest.raises(NotImplementedError, match=r"'s_aux' is not supported"):
        fa_hf.attention_forward(module, q, k, k, None, s_aux=torch.zeros(4))
