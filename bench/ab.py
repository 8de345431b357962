#!/usr/bin/env python3
"""A/B driver: bench_attn.py run against several builds of the library, alternating, in one call.

Each round runs every build once, in its own process, in the order given (so the card's drift
between runs falls on every build alike); the rows of every run are merged into one results file
with `run` (<name>_<round>) on each row and a `matmul_runs` list, and the median ratio of every
build to the first is printed per cell. Arguments after `--` go to bench_attn.py.

    python3 bench/ab.py --json ab.json --rounds 2 base=/tmp/a/libflashattn.so new=/tmp/b/libflashattn.so \
        -- --device cuda --ops fwd --peers '' --hdims 64
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent / "bench_attn.py"
KEY = ("op", "dtype", "hdim", "causal", "seqlen", "varlen", "softcap", "window", "deterministic")
LABELS = {"varlen": "varlen", "deterministic": "det"}  # how a cell's true flags print
NAMED = ("softcap", "window")  # the fields whose values print with their names


def cell_of(row) -> tuple:
    """The row's cell: its KEY fields (a window's list as a tuple, so that cells can be a set)."""
    return tuple(tuple(row[k]) if isinstance(row.get(k), list) else row.get(k) for k in KEY)


def library_digests(builds) -> dict:
    """sha256 of each build's library, by name: the results file says which bytes ran."""
    return {name: hashlib.sha256(Path(lib).read_bytes()).hexdigest() for name, lib in builds}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    bench_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("builds", nargs="+", help="name=path/to/libflashattn.so; the first is the base")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", required=True, help="the merged results file")
    p.add_argument("--note", default="", help="the results file's note")
    a = p.parse_args(own)
    builds = [b.split("=", 1) for b in a.builds]
    for name, lib in builds:
        if not Path(lib).is_file():
            p.error(f"build {name}: {lib} is not a file")
    digests = library_digests(builds)
    for name, digest in digests.items():
        print(f"{name}: sha256 {digest[:16]}", flush=True)
    if len(set(digests.values())) < len(digests):
        print("warning: two builds are the same file (identical sha256)", flush=True)

    meta, rows, matmul = {}, [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(1, a.rounds + 1):
            for name, lib in builds:
                run = f"{name}_{r}"
                out = Path(tmp) / f"{run}.json"
                env = dict(os.environ, FLASHATTN_LIBRARY=lib, PYTHONUNBUFFERED="1")
                print(f"== {run}: {lib}", flush=True)
                subprocess.run([sys.executable, str(BENCH), *bench_args, "--json", str(out)], env=env, check=True)
                res = json.loads(out.read_text())
                rows += [dict(row, run=run) for row in res.pop("rows")]
                matmul.append({"run": run, "start": res.get("matmul_bf16_tflops"),
                               "end": res.get("matmul_bf16_tflops_end")})
                meta = meta or res
    meta = {k: v for k, v in meta.items() if k not in ("notes", "matmul_bf16_tflops_end")}
    meta["matmul_bf16_tflops"] = max(m["start"] or 0 for m in matmul)
    meta["flashattn_library"] = ", ".join(f"{n}: {lib}" for n, lib in builds)
    meta["library_sha256"] = digests
    meta["command"] = "bench/ab.py " + " ".join(argv)
    meta["note"] = a.note
    Path(a.json).write_text(json.dumps(dict(meta, matmul_runs=matmul, rows=rows), indent=1) + "\n")

    # Median time of each build per cell, and its ratio to the base's (> 1: faster than the base);
    # the deterministic column's cells (flashattn_det) end in "det".
    ours = [row for row in rows if row.get("impl") in ("flashattn", "flashattn_det")]
    cells = sorted({cell_of(row) for row in ours}, key=str)
    base = builds[0][0]
    print("\ncell" + "".join(f"  {n}/{base}" for n, _ in builds[1:]))
    for cell in cells:
        med = {}
        for name, _ in builds:
            ms = [row["ms"] for row in ours if cell_of(row) == cell
                  and row["run"].rsplit("_", 1)[0] == name]
            med[name] = statistics.median(ms) if ms else float("nan")
        print(" ".join(LABELS[k] if c is True and k in LABELS else f"{k}={c}" if k in NAMED else str(c)
                       for k, c in zip(KEY, cell) if c is not None) +
              "".join(f"  {med[base] / med[n]:.3f}" for n, _ in builds[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
