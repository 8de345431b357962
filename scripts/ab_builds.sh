#!/usr/bin/env bash
# The library builds an A/B call compares (scripts/gpu_ab.sh), made on a machine without a GPU:
# HEAD, and HEAD with candidate commits applied, each built for sm_90a alone in a worktree of
# its own, copied flat (libflashattn.so, check_bwd, check_fwd, CHANGES: the diff's stat) into
# build-ab/NAME and packed into build-ab/libs.tar.xz, the one file the GPU call carries.
#   scripts/ab_builds.sh base= split2=ecf8e7f both=ecf8e7f,3066474
# NAME=COMMITS: COMMITS comma-separated, cherry-picked in order onto HEAD (none: HEAD as it is);
# a conflict stops the script. On the GPU machine:
#   mkdir -p /tmp/ab && tar xJf build-ab/libs.tar.xz -C /tmp/ab
#   scripts/gpu_ab.sh base=/tmp/ab/base split2=/tmp/ab/split2 -- <bench_attn.py arguments>
# The worktrees stay under AB_WORK (default /tmp/flashattn-ab), so a second run rebuilds only
# what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: scripts/ab_builds.sh NAME=[COMMIT,...] ..." >&2
  exit 2
fi
out=$PWD/build-ab
work=${AB_WORK:-/tmp/flashattn-ab}
head=$(git rev-parse HEAD)
mkdir -p "$out" "$work"
names=()
for spec in "$@"; do
  name=${spec%%=*}
  commits=${spec#*=}
  [[ "$spec" == *=* && "$name" =~ ^[A-Za-z0-9_]+$ ]] || { echo "bad build spec: $spec" >&2; exit 2; }
  tree=$work/$name
  if [ -d "$tree" ]; then
    git -C "$tree" reset -q --hard "$head"
  else
    git worktree add -q --detach "$tree" "$head"
  fi
  for c in ${commits//,/ }; do
    git -C "$tree" cherry-pick --no-commit "$c" || { echo "$name: $c does not apply to HEAD" >&2; exit 1; }
  done
  echo "== $name: HEAD ${commits:++ $commits}"
  [ -f "$tree/build/build.ninja" ] ||
    cmake -S "$tree" -B "$tree/build" -G Ninja -DFA_CUDA_ARCHS=90-real -DFA_BUILD_TOOLS=OFF -DFA_NATIVE=OFF >/dev/null
  if ! ninja -C "$tree/build" flashattn check_bwd check_fwd >"$out/$name.log" 2>&1; then
    tail -20 "$out/$name.log" >&2
    exit 1
  fi
  rm -rf "${out:?}/$name"
  mkdir -p "$out/$name"
  cp -L "$tree/build/src/libflashattn.so" "$tree/build/tests/cuda/check_bwd" "$tree/build/tests/cuda/check_fwd" \
    "$out/$name/"
  { echo "HEAD $head ${commits:++ $commits}"; git -C "$tree" diff --stat HEAD; } >"$out/$name/CHANGES"
  # What ptxas said of the kernels this build recompiled (the full lines stay in the log).
  echo "   $(grep -c 'bytes spill stores' "$out/$name.log") spilling, $(grep -c C7515 "$out/$name.log") with serialised wgmma (C7515)"
  names+=("$name")
done
tar cJf "$out/libs.tar.xz" -C "$out" "${names[@]}"
ls -l "$out/libs.tar.xz"
(cd "$out" && for n in "${names[@]}"; do sha256sum "$n/libflashattn.so"; done)
