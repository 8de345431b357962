"""Are two library builds' forward outputs bitwise the same? For a change that should not move a
bit (a skipped block that adds nothing, a reordered schedule): each build dumps O and LSE of a
fixed set of masked problems (causal, sliding windows, softcap; Sq != Sk; head dims 64, 128,
256; bf16 and fp16), then the dumps are compared.

    FLASHATTN_LIBRARY=base/libflashattn.so python3 scripts/same_outputs.py dump /tmp/base.pt
    FLASHATTN_LIBRARY=new/libflashattn.so  python3 scripts/same_outputs.py dump /tmp/new.pt
    python3 scripts/same_outputs.py compare /tmp/base.pt /tmp/new.pt   # exit 1 if any differ
"""
import sys

import torch

SHAPES = ((2, 2048, 2048, 4, 2), (1, 4096, 4096, 2, 2), (2, 1000, 1100, 4, 1), (1, 3000, 2500, 2, 2),
          (4, 512, 512, 4, 4))  # batch, seqlen_q, seqlen_k, heads_q, heads_kv
MASKS = ((True, (-1, -1), 0.0), (False, (100, 0), 0.0), (False, (300, 50), 0.0), (True, (-1, -1), 20.0),
         (False, (-1, -1), 0.0))  # causal, window, softcap


def cases():
    for d in (64, 128, 256):
        for shape in SHAPES:
            for mask in MASKS:
                for dt in (torch.bfloat16, torch.float16):
                    yield (d, *shape, *mask, dt)


def dump(path):
    from flashattn import flash_attn_func
    out = {}
    for i, c in enumerate(cases()):
        d, b, sq, sk, h, hk, causal, window, softcap, dt = c
        g = torch.Generator(device="cuda").manual_seed(1000 + i)
        q, k, v = (torch.randn(b, s, n, d, device="cuda", dtype=dt, generator=g)
                   for s, n in ((sq, h), (sk, hk), (sk, hk)))
        o, lse, _ = flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                    return_attn_probs=True)
        out[str(c)] = (o.cpu(), lse.cpu())
    torch.save(out, path)
    print(f"{len(out)} problems -> {path}")


def compare(a_path, b_path):
    a, b = torch.load(a_path), torch.load(b_path)
    if a.keys() != b.keys():
        sys.exit("the dumps hold different problems")
    bad = [k for k in a if not (torch.equal(a[k][0], b[k][0]) and torch.equal(a[k][1], b[k][1]))]
    print(f"{len(a)} problems, {len(bad)} differ bitwise")
    for k in bad[:10]:
        print("  ", k, "max |O difference|", (a[k][0].float() - b[k][0].float()).abs().max().item())
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
