#!/usr/bin/env bash
# FP8 against bf16 loss curves on real text, through the product path. Makes
# a byte-level token file with `tessera data text` from the Python standard
# library's sources on the host (several MB of real text: code, comments and
# docstrings), then trains JOB_FILE twice on it, 300 steps each (FP8 as the
# job says, then with fp8.disabled), on one coordinator and one worker. The
# per-step losses go to OUT_DIR/curves.jsonl and bench/loss_gap.py prints
# the largest gap between the curves and the gap at the last step.
#
# Usage, on the GPU host from the repository root with an unpacked bundle:
#   bench/loss_curves.sh BUNDLE_DIR OUT_DIR [JOB_FILE]
# JOB_FILE defaults to bench/jobs/step_221m.yaml. Environment: STEPS (300),
# DEVICE (cuda:0), TEXT_MB (8: how much text to tokenize), RUN_TIMEOUT_S
# (240 per run).
set -euo pipefail
if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 BUNDLE_DIR OUT_DIR [JOB_FILE]" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(cd "$1" && pwd)"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
job="${3:-$here/jobs/step_221m.yaml}"
steps="${STEPS:-300}"
in_bundle=(bash -c 'source "$0/env.sh" && exec "$@"' "$bundle")

# ---- The token file: the first TEXT_MB of the stdlib's .py files, sorted ----
stdlib="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"
python3 - "$stdlib" "${TEXT_MB:-8}" >"$out/text_files.txt" <<'PY'
import os, sys
root, budget = sys.argv[1], int(sys.argv[2]) << 20
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
               if f.endswith(".py") and "test" not in d)
total = 0
for path in files:
    if total >= budget:
        break
    total += os.path.getsize(path)
    print(path)
PY
mapfile -t text_files <"$out/text_files.txt"
"${in_bundle[@]}" tessera data text --out "$out/tokens.bin" "${text_files[@]}" >"$out/data.log"
echo "token file: $(cat "$out/data.log" | tail -1)"

# ---- Two job files: FP8 (as given) and bf16, both on the token file ----
python3 - "$job" "$out" "$steps" <<'PY'
import re, sys
job, out, steps = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(job).read()
text = re.sub(r"(?m)^  synthetic:\n(    .*\n)+", f"  token_file: {out}/tokens.bin\n", text)
text = re.sub(r"(?m)^steps: .*$", f"steps: {steps}", text)
text = re.sub(r"(?m)^name: (.*)$", r"name: \1-text", text)
assert "token_file" in text, "the job has no synthetic data block to replace"
open(f"{out}/fp8.yaml", "w").write(text)
bf16 = re.sub(r"(?m)^fp8:\n(  .*\n)+", "fp8:\n  disabled: true\n", text)
bf16 = re.sub(r"(?m)^name: (.*)$", r"name: \1-bf16", bf16)
open(f"{out}/bf16.yaml", "w").write(bf16)
PY

# ---- Coordinator + worker, the two runs one after the other ----
source "$here/local_stack.sh"
stack_start "$bundle" "$out" "${DEVICE:-cuda:0}"
rc=0
for run in fp8 bf16; do
  timeout "${RUN_TIMEOUT_S:-240}" "${in_bundle[@]}" tessera submit "$out/$run.yaml" --watch --json \
    --coordinator="$stack_addr" >"$out/$run.events.jsonl" 2>"$out/$run.err" || { echo "$run run exited $?"; rc=1; }
done
stack_stop
python3 "$here/loss_gap.py" --fp8 "$out/fp8.events.jsonl" --bf16 "$out/bf16.events.jsonl" \
  --json-out "$out/curves.jsonl" | tee "$out/loss_gap.md" || rc=1
exit "$rc"
