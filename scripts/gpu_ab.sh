#!/usr/bin/env bash
# A/B of library builds on a GPU machine, every candidate checked in the same call as its timing.
# For each build after the first (the base): the CUDA check programs (against the CPU reference,
# the sm90 backward's list also on dirtied workspaces of the caller's and with dK and dV by plain
# stores; determinism) and
# compute-sanitizer on small awkward shapes, side by side; then bench/ab.py over
# all the builds, alternating, alone on the GPU (docs/PERF.md: how a change is measured).
#   scripts/gpu_ab.sh base=DIR new=DIR ... -- <bench_attn.py arguments>
# DIR holds one build's libflashattn.so, check_bwd and check_fwd (from its src/ and tests/cuda/,
# copied flat). Writes $OUT/ab.json and $OUT/logs.tgz. CHECKS=0 leaves the checks out;
# CHECK_OPS (default "fwd bwd") names the passes checked, for a change to one of them only, and
# CHECK_OPS_<name> overrides it for the build <name>;
# CHECK_DET_HDIM limits check_bwd determinism to that head dim (default all three);
# BWD_SANITIZE_EXTRA (comma-separated awkward shape names) adds to the backward's sanitizer shapes;
# ROUNDS (default 2) is ab.py's; NOTE goes into ab.json, followed by each build's commits where
# its folder has ab_builds.sh's CHANGES (the first build's HEAD is then the file's commit).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/flashattn-ab}
LOGS=$OUT/logs
mkdir -p "$LOGS"
trap 'tar czf "$OUT/logs.tgz" -C "$LOGS" . && rm -rf "$LOGS"' EXIT
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 FA_AWKWARD_SHAPES=$PWD/tests/awkward_shapes.txt

builds=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do builds+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ ${#builds[@]} -lt 2 ]; then
  echo "usage: scripts/gpu_ab.sh base=DIR new=DIR ... -- <bench_attn.py arguments>" >&2
  exit 2
fi

source scripts/gpu_steps.sh  # step, report_steps, BWD_SANITIZE_SHAPES
sanitize_bwd=$BWD_SANITIZE_SHAPES${BWD_SANITIZE_EXTRA:+,$BWD_SANITIZE_EXTRA}
CHECK_OPS=${CHECK_OPS:-fwd bwd}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
libs=()
built=""
for i in "${!builds[@]}"; do
  name=${builds[$i]%%=*}
  dir=$(cd "${builds[$i]#*=}" && pwd) || exit 2
  ln -sf libflashattn.so "$dir/libflashattn.so.0"  # the check programs' DT_NEEDED
  libs+=("$name=$dir/libflashattn.so")
  # ab_builds.sh's CHANGES names each build's commits; the results file takes them (the copy of
  # .git on the GPU machine may be older than the tree it came with).
  if [ -f "$dir/CHANGES" ]; then
    made=$(head -1 "$dir/CHANGES")
    [ "$i" = 0 ] && export FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$(echo "$made" | awk '{print $2}')}
    built+="$name: $made; "
  fi
  if [ "$i" = 0 ] || [ "${CHECKS:-1}" = 0 ]; then continue; fi
  run=(env LD_LIBRARY_PATH="$dir" FLASHATTN_LIBRARY="$dir/libflashattn.so")
  ops_of_build=CHECK_OPS_$name
  ops=${!ops_of_build:-$CHECK_OPS}
  if [[ " $ops " == *" bwd "* ]]; then
    step "${name}_bwd_sm90" 300 "${run[@]}" "$dir/check_bwd" sm90
    step "${name}_bwd_sm90_dirty" 300 "${run[@]}" FA_CHECK_OWN_WORKSPACE=1 "$dir/check_bwd" sm90
    step "${name}_bwd_sm90_plain" 300 "${run[@]}" FLASHATTN_SM90_DKDV_STORE=plain "$dir/check_bwd" sm90
    step "${name}_bwd_check" 300 "${run[@]}" "$dir/check_bwd" check
    step "${name}_bwd_determinism" 300 "${run[@]}" "$dir/check_bwd" determinism ${CHECK_DET_HDIM:-}
    for tool in memcheck racecheck synccheck; do
      step "${name}_bwd_$tool" 300 "${run[@]}" FA_CHECK_SHAPE="$sanitize_bwd" \
        compute-sanitizer --tool "$tool" --error-exitcode 1 "$dir/check_bwd" small
    done
  fi
  if [[ " $ops " == *" fwd "* ]]; then
    step "${name}_fwd_correct" 300 "${run[@]}" "$dir/check_fwd" correct "$FA_AWKWARD_SHAPES"
    step "${name}_fwd_determinism" 300 "${run[@]}" "$dir/check_fwd" determinism
    for tool in memcheck racecheck synccheck; do
      step "${name}_fwd_$tool" 300 "${run[@]}" \
        compute-sanitizer --tool "$tool" --error-exitcode 1 "$dir/check_fwd" sanitize
    done
  fi
done
wait

report_steps
[ ${#failed[@]} = 0 ] || echo "failed: ${failed[*]} (timed anyway)"

python3 bench/ab.py --json "$OUT/ab.json" --rounds "${ROUNDS:-2}" --note "${NOTE:-}${NOTE:+ }${built%; }" "${libs[@]}" -- "$@" 2>&1 | tee "$LOGS/ab.log"
ab=${PIPESTATUS[0]}
[ ${#failed[@]} = 0 ] && exit "$ab" || exit 1
