"""Python tests: the correctness rule of docs/DESIGN.md as assertions.

fp32 (CPU) against fp64: max error <= 1e-5 * max|ref|. bf16/fp16 against ref_hi (fp64 on the
CPU, fp32 on the GPU, same rounded inputs): err <= factor * err_low + atol, err_low the error of
the same reference run in the input precision, atol the rounding step at the output's
magnitude, factor 2 for outputs and 3 for gradients. NaN never passes; -inf must match.
"""

import torch

FP32_REL = 1e-5


def _max_abs(t):
    return t.abs().max().item() if t.numel() else 0.0


def assert_close(name, got, ref_hi, ref_low=None, factor=2.0, floor=1e-6):
    """got in the storage dtype; ref_hi high precision; ref_low the reference in got's dtype.

    floor bounds max|ref| from below in the tolerances: gradients pass floor=1 because the
    backward's dS = P * (dP - D) leaves fp32 rounding (~1e-7) where the exact gradient is 0
    (a single visible key, for one).
    """
    assert got.shape == ref_hi.shape, f"{name}: shape {tuple(got.shape)} != reference {tuple(ref_hi.shape)}"
    if got.numel() == 0:
        return
    g = got.detach().to(ref_hi.dtype)
    r = ref_hi.detach()
    assert not torch.isnan(g).any(), f"{name}: NaN in the result ({int(torch.isnan(g).sum())} elements; unwritten rows?)"
    ginf, rinf = torch.isinf(g), torch.isinf(r)
    assert torch.equal(ginf, rinf) and torch.equal(g[ginf], r[rinf]), (
        f"{name}: infinities differ ({int(ginf.sum())} in the result, {int(rinf.sum())} in the reference)"
    )
    fin = ~rinf
    err = _max_abs(g[fin] - r[fin])
    scale = _max_abs(r[fin])
    if got.dtype == torch.float32 or ref_low is None:
        tol = FP32_REL * max(scale, floor)
        assert err <= tol, f"{name}: max error {err:.3e} > {tol:.3e} (1e-5 * max|ref| = {scale:.3e})"
        return
    low = ref_low.detach().to(ref_hi.dtype)
    err_low = _max_abs(low[fin] - r[fin])
    atol = torch.finfo(got.dtype).eps * max(scale, floor)
    tol = factor * err_low + atol
    assert err <= tol, (
        f"{name}: max error {err:.3e} > {factor}*err_low ({err_low:.3e}) + atol ({atol:.3e}) = {tol:.3e}"
    )
