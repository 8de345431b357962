"""Python tests: the torch reference attention and the shared awkward-shape list.

The reference materialises S and P in a chosen precision with the library's mask
convention (bottom-right causal, window (left, right), softcap before masking, empty rows
give O = 0 and LSE = -inf), and is differentiable for the backward checks.
"""

import math
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SHAPES_FILE = ROOT / "tests" / "awkward_shapes.txt"


@dataclass
class Shape:
    name: str
    B: int
    Sq: int
    Sk: int
    Hq: int
    Hkv: int
    D: int
    Dv: int
    seqlens: list  # [(sq, sk)] per sequence, for the varlen runs

    def __str__(self):
        return self.name


def load_shapes(path=SHAPES_FILE):
    """Parses tests/awkward_shapes.txt: '#' comments, a header line, one case a line."""
    lines = [ln.split() for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    header, rows = lines[0], lines[1:]
    out = []
    for row in rows:
        r = dict(zip(header, row))
        B, Sq, Sk = int(r["B"]), int(r["Sq"]), int(r["Sk"])
        if r["seqlens"] == "-":
            seqlens = [(Sq, Sk)] * B
        else:
            seqlens = [tuple(int(x) for x in pair.split(":")) for pair in r["seqlens"].split(",")]
        out.append(Shape(r["name"], B, Sq, Sk, int(r["Hq"]), int(r["Hkv"]), int(r["D"]), int(r["Dv"]), seqlens))
    return out


def visible(sq, sk, causal, window, device):
    """Boolean [sq, sk]: query i sees key j iff i+sk-sq-left <= j <= i+sk-sq+right."""
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    d = j - (i + sk - sq)
    m = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        m &= d >= -left
    if right >= 0:
        m &= d <= right
    return m


def attention_ref(q, k, v, scale=None, causal=False, window=None, softcap=0.0, dtype=torch.float64):
    """q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] -> out [B, Sq, Hq, Dv], lse [B, Hq, Sq].

    Computed and returned in `dtype` (fp64 on the CPU, fp32 on the GPU, or the input
    precision for ref_low).
    """
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    g = Hq // Hkv
    qc, kc, vc = (t.to(dtype) for t in (q, k, v))
    kc = kc.repeat_interleave(g, dim=2)
    vc = vc.repeat_interleave(g, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", qc, kc) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    mask = visible(Sq, Sk, causal, window, q.device)
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True).detach() if Sk > 0 else s.new_zeros(B, Hq, Sq, 1)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    lse = (torch.log(l) + m).squeeze(-1)
    p = p / torch.where(l > 0, l, torch.ones_like(l))
    out = torch.einsum("bhqk,bkhd->bqhd", p, vc)
    return out, lse


def varlen_ref(q, k, v, cu_q, cu_k, **kw):
    """Packed q [total_q, Hq, D] etc.: the dense reference per sequence; lse [Hq, total_q]."""
    outs, lses = [], []
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        qb = q[cq[b]:cq[b + 1]].unsqueeze(0)
        kb = k[ck[b]:ck[b + 1]].unsqueeze(0)
        vb = v[ck[b]:ck[b + 1]].unsqueeze(0)
        o, l = attention_ref(qb, kb, vb, **kw)
        outs.append(o[0])
        lses.append(l[0])
    dtype = kw.get("dtype", torch.float64)
    out = torch.cat(outs, 0) if outs else q.new_zeros(0, q.shape[1], v.shape[2], dtype=dtype)
    lse = torch.cat(lses, 1) if lses else q.new_zeros(q.shape[1], 0, dtype=dtype)
    return out, lse
