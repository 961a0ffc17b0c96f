#!/usr/bin/env bash
# The coordinator's status page (--web_listen) in headless Chromium, with two
# CPU workers:
#  - during a running job (training and validation), the page charts it: the
#    chart canvas exists, has a size, and holds one point per step reported
#    so far (at least 10 of the 20 or more done when it loads, at most the
#    steps done after it has loaded);
#    the screenshot shows the training line;
#  - after a job finishes, its chart holds exactly one point per step of the
#    job and one per evaluation, and the screenshot shows both series.
# Chromium fetches nothing but the coordinator's page (it works offline).
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}"
source "$root/tests/shell_stack.sh" webpage
tessera="$root/client/tessera"
check="/usr/bin/python3 $root/tests/status_page_check.py"
command -v chromium >/dev/null || fail "chromium is not installed (deploy/setup.sh installs it)"

start_coordinator --web_listen=127.0.0.1:0
url=$(grep -o 'http://[^ ]*/' "$dir/coordinator.log") || fail "no status page line"
start_cpu_workers

head -c 20000 "$root/client/testdata/tokenizer_corpus.txt" >"$dir/val.txt"
"$tessera" data text --out "$dir/val.tok" "$dir/val.txt" >"$dir/data.log" 2>&1 ||
  fail "data text: $(cat "$dir/data.log")"
job_file() {  # STEPS
  cat <<JOB
name: webpage
model: {vocab_size: 256, d_model: 32, n_layers: 1, n_heads: 2, ffn_dim: 64, seq_len: 16}
data:
  synthetic: {task: COPY}
  micro_batch_size: 2
  validation: {token_file: $dir/val.tok, eval_interval_steps: 10, eval_batches: 1}
optimizer: {lr: 0.003, warmup_steps: 1}
world_size: 2
device_kind: CPU
steps: $1
seed: 5
JOB
}

# Headless Chromium: PAGE OUT MODE (dom or png).
browse() {
  local flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run
               --user-data-dir="$dir/chromium-profile" --window-size=1280,1000
               --virtual-time-budget=5000)
  if [ "$3" = dom ]; then
    chromium "${flags[@]}" --dump-dom "$1" >"$2" 2>>"$dir/chromium.log" || fail "chromium --dump-dom"
  else
    chromium "${flags[@]}" --screenshot="$2" "$1" >>"$dir/chromium.log" 2>&1 || fail "chromium --screenshot"
  fi
}

# A long job, looked at while it runs, then cancelled.
job_file 100000 >"$dir/long.yaml"
long=$("$tessera" submit "$dir/long.yaml" --coordinator="$addr" | grep -o 'job-[0-9]*' | head -1)
$check wait "$url" "$long" 20 120
browse "$url#$long" "$dir/running.html" dom
read -r state done_after < <($check steps "$url" "$long")
[ "$state" = RUNNING ] || fail "$long is $state after the page loaded"
$check dom "$dir/running.html" "$long" RUNNING 10 "$done_after" 1 $((done_after / 10 + 1))
browse "$url#$long" "$dir/running.png" png
$check png "$dir/running.png" 500 0
"$tessera" cancel "$long" --coordinator="$addr" >/dev/null

# A short job, looked at once it has finished: every step and evaluation.
job_file 60 >"$dir/short.yaml"
out=$("$tessera" submit "$dir/short.yaml" --watch --coordinator="$addr") || fail "short job: $out"
short=$(grep -o 'submitted job-[0-9]*' <<<"$out" | cut -d' ' -f2)
browse "$url#$short" "$dir/finished.html" dom
# Evaluations after steps 10, 20, ..., 60 (the last step always evaluates).
$check dom "$dir/finished.html" "$short" SUCCEEDED 60 60 6 6
browse "$url#$short" "$dir/finished.png" png
$check png "$dir/finished.png" 500 $((42 + 6 * 10))
echo "PASS"
