# Sourced by the GPU scripts (gpu_proof.sh, gpu_ab.sh), which set $LOGS: background steps with
# their own logs and exit statuses, their summary, and the shared lists of shapes.

# The backward's sanitizer shapes (check_bwd small, FA_CHECK_SHAPE): len17, q1_k17 and d200_s33
# run on the sm90 backward (head dims 64, 128, 256: dense), d_lt_dv and d256_dv8 on sm80;
# q203_k113, len113 and q300_d256 take a kv tile over two or more steps at 64, 128 and 256,
# q1050_k3 over seventeen at 128.
BWD_SANITIZE_SHAPES=len17,q1_k17,d200_s33,d_lt_dv,d256_dv8,q1050_k3,q203_k113,len113,q300_d256

# step NAME SECONDS CMD...: runs CMD in the background with a time limit, its output in
# $LOGS/NAME.log and its exit status and seconds in $LOGS/NAME.rc.
step() {
  local name=$1 limit=$2; shift 2
  ( local t0=$SECONDS
    timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
    echo "$? $((SECONDS - t0))" > "$LOGS/$name.rc" ) &
}

# report_steps: a line a finished step (status, seconds, its log's last line); the failed ones'
# names in the array `failed`.
report_steps() {
  failed=()
  local rc name code secs
  for rc in "$LOGS"/*.rc; do
    [ -e "$rc" ] || continue
    name=$(basename "$rc" .rc)
    read -r code secs < "$rc"
    printf '%-30s rc=%-3s %4ss  %s\n' "$name" "$code" "$secs" "$(tail -n 1 "$LOGS/$name.log" | cut -c1-80)"
    [ "$code" = 0 ] || failed+=("$name")
  done
}
