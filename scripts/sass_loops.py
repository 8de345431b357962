#!/usr/bin/env python3
"""Local memory in the main loops of the sm90 kernels, read from their SASS (no GPU needed).

For every kernel with HGMMA instructions in a library (libflashattn.so, through cuobjdump -sass)
or in a saved SASS listing: its control-flow graph (basic blocks split at branch targets and
after branches), the natural loops of its back edges (an edge into a block that dominates its
source), and of the loops holding an HGMMA the innermost one (fewest instructions): the key loop
of a forward consumer, the step loop of a backward one. Prints, a kernel a line, that loop's
instruction, HGMMA, LDL and STL counts, then the kernels whose innermost HGMMA loop touches local
memory. Outer loops (the tile loop, which holds the prologue and epilogue) are not judged.

  scripts/sass_loops.py build/src/libflashattn.so            # cuobjdump on PATH
  scripts/sass_loops.py listing.sass --all                   # also every HGMMA loop, outermost last

Template arguments are printed in order (FwdKernel: D, BM, BN, stages, overlap, ping-pong, varlen,
bf16, uniform group, next S, rows under P·V, split producer, tail, passes; BwdKernel: D, BN, BM,
stages, dK across steps, bf16, dQ arriving late, passes; sm90/*_kernel.cuh). Exit status 1 when
some innermost HGMMA loop holds LDL or STL.
"""
import argparse
import re
import subprocess
import sys
from collections import defaultdict

OPERAND_TARGET = re.compile(r"\b(?:BRA|BRX)\b[^;]*?(0x[0-9a-f]+)")
PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def read_functions(path):
    """{mangled name: [(address, instruction text)]} of a library or a saved listing."""
    if path.endswith(".sass") or path.endswith(".txt"):
        text = open(path).read()
    else:
        text = subprocess.run(["cuobjdump", "-sass", path], check=True, capture_output=True, text=True).stdout
    funcs, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?);", line)
        if cur is not None and m:
            cur.append((int(m.group(1), 16), m.group(2).strip()))
    return funcs


def opcode(text):
    return PREDICATE.sub("", text).split()[0] if text else ""


def hgmma_loops(ins):
    """(instructions, HGMMA, LDL, STL) of every natural loop that holds an HGMMA."""
    index = {a: i for i, (a, _) in enumerate(ins)}

    def target(t):  # the index of a branch's target instruction, or None
        m = OPERAND_TARGET.search(t) if opcode(t).startswith(("BRA", "BRX")) else None
        return index.get(int(m.group(1), 16)) if m else None

    leaders = {0}
    for i, (_, t) in enumerate(ins):
        if opcode(t).startswith(("BRA", "BRX", "EXIT", "RET", "JMP")):
            leaders.add(i + 1)
            if target(t) is not None:
                leaders.add(target(t))
    starts = sorted(x for x in leaders if x < len(ins))
    block_of = {}
    for b, s in enumerate(starts):
        for i in range(s, starts[b + 1] if b + 1 < len(starts) else len(ins)):
            block_of[i] = b
    n = len(starts)
    succ, pred = defaultdict(set), defaultdict(set)
    for b, s in enumerate(starts):
        last = (starts[b + 1] if b + 1 < n else len(ins)) - 1
        t = ins[last][1]
        op, conditional = opcode(t), t.startswith("@")
        if target(t) is not None:
            succ[b].add(block_of[target(t)])
        if not (op.startswith(("BRA", "EXIT", "RET")) and not conditional) and b + 1 < n:
            succ[b].add(b + 1)
    for u, vs in succ.items():
        for v in vs:
            pred[v].add(u)
    # Dominators, iteratively over blocks in address order (a reducible graph converges fast).
    dom = [set(range(n)) for _ in range(n)]
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for b in range(1, n):
            ps = [dom[p] for p in pred[b]]
            new = (set.intersection(*ps) if ps else set()) | {b}
            if new != dom[b]:
                dom[b], changed = new, True
    loops = []
    for u in range(n):
        for h in succ[u]:
            if h not in dom[u]:
                continue
            body, stack = {h, u}, [u]
            while stack:
                for p in pred[stack.pop()]:
                    if p not in body:
                        body.add(p)
                        stack.append(p)
            texts = [t for i, (_, t) in enumerate(ins) if block_of[i] in body]
            count = lambda op: sum(1 for t in texts if re.search(rf"\b{op}\b", t))
            if count("HGMMA"):
                loops.append((len(texts), count("HGMMA"), count("LDL"), count("STL")))
    return sorted(set(loops))


def describe(mangled):
    m = re.search(r"sm90\d+(\w+?Kernel)I(.*)", mangled)
    if not m:
        return mangled[:100]
    args = re.findall(r"L[ib](\d+)E", m.group(2))
    return f"{m.group(1)}<{','.join(args)}>"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="libflashattn.so (read with cuobjdump -sass) or a saved .sass listing")
    ap.add_argument("--all", action="store_true", help="list every loop that holds an HGMMA")
    a = ap.parse_args()
    flagged = []
    for name, ins in read_functions(a.path).items():
        loops = hgmma_loops(ins)
        if not loops:
            continue
        size, hgmma, ldl, stl = loops[0]
        line = f"{describe(name):70s} {size:5d} instr {hgmma:3d} HGMMA  LDL {ldl:2d}  STL {stl:2d}"
        if a.all:
            line += "   all: " + " ".join(f"{s}/{h}/{l}/{t}" for s, h, l, t in loops)
        print(line)
        if ldl or stl:
            flagged.append(describe(name))
    print(f"{len(flagged)} kernels with local memory in their innermost HGMMA loop" + (":" if flagged else ""))
    for k in flagged:
        print("  " + k)
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
