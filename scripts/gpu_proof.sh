#!/usr/bin/env bash
# GPU proof run, for a machine with an NVIDIA GPU and a CUDA build of the project in $BUILD.
# Pass FLASHATTN_COMMIT=<sha> where the tree has no .git, so results name their commit.
# Runs the steps named on the command line (default: all), each with its own log, packed into
# $OUT/logs.tgz; the benchmark writes $OUT/bench.json and bench.png:
#   checks     the CUDA check programs: correctness vs the CPU reference (every path, and the
#              sm90 backward's own list, once more on dirtied workspaces of the caller's and
#              once with dK and dV by plain stores, FLASHATTN_SM90_DKDV_STORE=plain),
#              determinism, B·H past 2^16, offsets past 2^31
#   sanitize   compute-sanitizer memcheck, racecheck, synccheck and initcheck on small awkward
#              shapes, forward and backward
#   compact    the sm80 rows for GPUs with less shared memory, run here by FLASHATTN_SMEM_LIMIT:
#              166912 (an A100's opt-in) and 101376 (sm86/89/120): checks, determinism,
#              compute-sanitizer. With a build without the sm90 kernels (FA_SM90=OFF) every
#              head dim takes them; with sm90 kernels, those that fit the limit run instead
#   python     the pytest suite's GPU cases (the `gpu` marker)
#   cli        flashattn info, check --device cuda, demo (with its memory chart)
#   bench      bench/bench_attn.py on the ANCHORS grid against SDPA's FLASH and cuDNN backends:
#              forward, backward and training step (both), and the deterministic mode's speed
# The programs of checks, sanitize, python and cli are independent and need no quiet GPU: they
# run side by side. The benchmark runs alone, after them.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/flashattn-proof}
LOGS=$OUT/logs  # packed into $OUT/logs.tgz at exit: the device returns only a few files
mkdir -p "$LOGS"
trap 'tar czf "$OUT/logs.tgz" -C "$LOGS" . && rm -rf "$LOGS"' EXIT
export FLASHATTN_LIBRARY=$PWD/$BUILD/src/libflashattn.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
export FA_AWKWARD_SHAPES=$PWD/tests/awkward_shapes.txt
export LD_LIBRARY_PATH=$PWD/$BUILD/src:${LD_LIBRARY_PATH:-}
steps=${*:-checks sanitize compact python cli bench}

source scripts/gpu_steps.sh  # step, report_steps, BWD_SANITIZE_SHAPES

nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,memory.used --format=csv,noheader
C=$BUILD/tests/cuda
for s in $steps; do
  case $s in
    checks)
      step check_fwd_correct 300 "$C/check_fwd" correct "$FA_AWKWARD_SHAPES"
      step check_fwd_determinism 200 "$C/check_fwd" determinism
      step check_fwd_bigoffset 200 "$C/check_fwd" bigoffset
      step check_bwd_check 300 "$C/check_bwd" check
      step check_bwd_sm90 300 "$C/check_bwd" sm90
      FA_CHECK_OWN_WORKSPACE=1 step check_bwd_sm90_dirty 300 "$C/check_bwd" sm90
      FLASHATTN_SM90_DKDV_STORE=plain step check_bwd_sm90_plain 300 "$C/check_bwd" sm90
      step check_bwd_determinism 200 "$C/check_bwd" determinism
      step check_bwd_bigbatch 300 "$C/check_bwd" bigbatch
      step check_bwd_bigoffset 300 "$C/check_bwd" bigoffset ;;
    sanitize)
      # initcheck does not count the TMA unit's stores as writes (a torch kernel reading the
      # forward's O, stored by TMA, is reported), and the sm90 backward stores a q block's first
      # dQ tile by TMA into an accumulator it has not zeroed, which the postprocess then reads.
      # So the backward's initcheck runs on a workspace of the caller's, filled by cudaMemset
      # (initialised for the tool) with 0x7F bytes: a read of a value nothing wrote shows in dQ.
      for tool in memcheck racecheck synccheck initcheck; do
        step "sanitize_fwd_$tool" 300 compute-sanitizer --tool "$tool" --error-exitcode 1 "$C/check_fwd" sanitize
        own=0; [ "$tool" = initcheck ] && own=1
        FA_CHECK_OWN_WORKSPACE=$own FA_CHECK_SHAPE=$BWD_SANITIZE_SHAPES step "sanitize_bwd_$tool" 300 \
          compute-sanitizer --tool "$tool" --error-exitcode 1 "$C/check_bwd" small
      done ;;
    compact)
      A=166912 R=101376  # the backward above head dim 128 is refused at R: those cases are left out
      FLASHATTN_SMEM_LIMIT=$A step compact_a100_check_bwd 300 "$C/check_bwd" check
      FLASHATTN_SMEM_LIMIT=$A step compact_a100_determinism 200 "$C/check_bwd" determinism 256
      FLASHATTN_SMEM_LIMIT=$R FA_CHECK_MAX_HDIM=128 step compact_99k_check_bwd 300 "$C/check_bwd" check
      FLASHATTN_SMEM_LIMIT=$R step compact_99k_determinism 200 "$C/check_bwd" determinism 128
      FLASHATTN_SMEM_LIMIT=$R step compact_99k_check_fwd 300 "$C/check_fwd" correct "$FA_AWKWARD_SHAPES"
      for tool in memcheck racecheck synccheck; do
        FLASHATTN_SMEM_LIMIT=$A FA_CHECK_SHAPE=d200_s33,d256_dv8 step "compact_a100_bwd_$tool" 300 \
          compute-sanitizer --tool "$tool" --error-exitcode 1 "$C/check_bwd" small
        FLASHATTN_SMEM_LIMIT=$R FA_CHECK_SHAPE=len17,q1_k17,d_lt_dv,len113 step "compact_99k_bwd_$tool" 300 \
          compute-sanitizer --tool "$tool" --error-exitcode 1 "$C/check_bwd" small
        FLASHATTN_SMEM_LIMIT=$R step "compact_99k_fwd_$tool" 300 \
          compute-sanitizer --tool "$tool" --error-exitcode 1 "$C/check_fwd" sanitize
      done ;;
    python)
      xdist=$(python3 -c "import xdist" 2>/dev/null && echo "-n 4")
      step pytest_gpu 300 python3 -m pytest -q -m gpu $xdist python/tests ;;
    cli)
      step cli_info 30 "$BUILD/tools/flashattn" info
      step cli_check 200 "$BUILD/tools/flashattn" check --device cuda
      step cli_demo 200 "$BUILD/tools/flashattn" demo --plot "$OUT/demo-memory.png" ;;
    bench)
      wait  # alone on the GPU
      step bench 540 python3 bench/bench_attn.py --device cuda --peers sdpa_flash,sdpa_cudnn \
        --ops fwd,bwd,step --deterministic --json "$OUT/bench.json" --plot "$OUT/bench.png" ;;
    *) echo "unknown step: $s"; echo "1 0" > "$LOGS/$s.rc" ;;
  esac
done
wait

report_steps
[ ${#failed[@]} = 0 ] && echo "all steps passed" || { echo "failed: ${failed[*]}"; exit 1; }
