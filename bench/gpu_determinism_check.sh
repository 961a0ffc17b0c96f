#!/usr/bin/env bash
# Bit-reproducible training on the CUDA engine, through the product path: one
# coordinator and one worker on cuda:0 (bench/local_stack.sh) run each job
# file three times, one after another in the same worker process: twice as
# written (GEMM algorithms chosen deterministically, the default) and once
# with nondeterministic_gemm_tuning: true (GEMM candidates timed on the
# first step, the fastest kept). Per job it prints each run's final loss
# (%.9g and its float bits), its median step time (steps after the first
# SKIP, from the job's own step_time_s), whether the two deterministic runs
# gave the same loss at every step ("EXACT") or not ("DIFFERS", naming the
# first step that differs), and the timed run's final loss and step time
# against them: the cost of determinism. Exits non-zero if a deterministic
# pair differs or a run did not succeed; the timed run may differ.
#
# Usage, on the GPU host from the repository root with an unpacked bundle:
#   bench/gpu_determinism_check.sh BUNDLE_DIR OUT_DIR
# Environment (defaults): JOBS (the four jobs below, space-separated),
# STEPS (per job: 30, or 20 for a job file named *1b*), SKIP (5),
# DEVICE (cuda:0), SUBMIT_TIMEOUT_S (300). On an H100 the default run takes
# about 3 minutes (221M steps ~40 ms, 1.1B ~80 ms, a few seconds of set-up
# per run). A dry run of the script's logic without a GPU:
#   DEVICE=cpu JOBS=bench/jobs/dryrun_cpu.yaml STEPS=8 SKIP=2 \
#     bench/gpu_determinism_check.sh BUNDLE_DIR /tmp/determinism
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUNDLE_DIR OUT_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(cd "$1" && pwd)"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
read -r -a jobs <<<"${JOBS:-$here/jobs/step_221m.yaml $here/jobs/step_221m_bf16.yaml $here/jobs/step_1b.yaml $here/jobs/step_1b_bf16.yaml}"
skip="${SKIP:-5}"
device="${DEVICE:-cuda:0}"
submit_timeout="${SUBMIT_TIMEOUT_S:-300}"
started=$SECONDS

source "$here/local_stack.sh"
rm -rf "$out/state"
stack_start "$bundle" "$out" "$device"

runs_failed=0
names=()
for job in "${jobs[@]}"; do
  name="$(basename "$job" .yaml)"
  names+=("$name")
  steps="${STEPS:-$([[ "$name" == *1b* ]] && echo 20 || echo 30)}"
  for run in first second timed; do
    file="$out/$name.$run.yaml"
    # The job as written, with its name and step count replaced (top-level
    # keys only) and, for the timed run, the opt-out set.
    grep -v -E '^(name|steps|nondeterministic_gemm_tuning):' "$job" >"$file"
    {
      echo "name: determinism-$name-$run"
      echo "steps: $steps"
      [[ "$run" == timed ]] && echo "nondeterministic_gemm_tuning: true"
    } >>"$file"
    echo "== $name, $run run ($steps steps, $((SECONDS - started)) s in)"
    if ! timeout "$submit_timeout" "${in_bundle[@]}" tessera submit "$file" --watch --json \
      --coordinator="$stack_addr" >"$out/$name.$run.events.jsonl" 2>"$out/$name.$run.err"; then
      echo "   tessera submit failed or timed out; last lines:"
      tail -n 3 "$out/$name.$run.err" "$out/worker.log" 2>/dev/null | sed 's/^/   /'
      runs_failed=1
    fi
  done
done
stack_stop

set +e
PYTHONPATH="$here" python3 - "$out" "$skip" "${names[@]}" <<'PY'
import json
import struct
import sys

out, skip, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]


def read_run(path):
    """{step: loss}, {step: step_time_s} and the job's last state."""
    losses, times, state = {}, {}, None
    try:
        with open(path) as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                if isinstance(event.get("step"), dict):
                    s = event["step"]
                    k = int(s.get("step", 0))  # proto JSON omits step 0's index
                    losses[k] = float(s.get("loss", "nan"))
                    times[k] = float(s.get("step_time_s", 0))
                elif "state_change" in event:
                    state = event["state_change"].get("state", state)
    except OSError:
        pass
    return losses, times, state


def bits(x):
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]


def median_ms(times):
    warm = sorted(t for k, t in times.items() if k >= skip)
    return 1e3 * warm[len(warm) // 2] if warm else float("nan")


ok = True
print()
print("| job | run | state | steps | final loss | bits | median step ms |")
print("| --- | --- | --- | ---: | ---: | --- | ---: |")
verdicts = []
for name in names:
    runs = {r: read_run(f"{out}/{name}.{r}.events.jsonl") for r in ("first", "second", "timed")}
    for r, (losses, times, state) in runs.items():
        last = losses[max(losses)] if losses else float("nan")
        print(f"| {name} | {r} | {state} | {len(losses)} | {last:.9g} | {bits(last)} | "
              f"{median_ms(times):.2f} |")
    (a, ta, sa), (b, tb, sb), (c, tc, sc) = runs["first"], runs["second"], runs["timed"]
    if sa != "SUCCEEDED" or sb != "SUCCEEDED" or not a or sorted(a) != sorted(b):
        verdict = "INCOMPLETE (a deterministic run did not succeed)"
        ok = False
    else:
        differ = [k for k in sorted(a) if struct.pack("<f", a[k]) != struct.pack("<f", b[k])]
        if differ:
            k = differ[0]
            verdict = (f"DIFFERS at {len(differ)} of {len(a)} steps, first at step {k} "
                       f"({a[k]:.9g} vs {b[k]:.9g})")
            ok = False
        else:
            verdict = f"EXACT (all {len(a)} losses)"
    if sc == "SUCCEEDED" and c and a:
        last_a, last_c = a[max(a)], c[max(c)]
        same = struct.pack("<f", last_a) == struct.pack("<f", last_c)
        gap = abs(last_c - last_a) / abs(last_a) if last_a else float("nan")
        ratio = median_ms(tc) / median_ms(ta) if median_ms(ta) else float("nan")
        timed = (f"timed GEMMs: final loss {'same bits' if same else f'differs by {gap:.2e}'}, "
                 f"median step {ratio:.3f}x the deterministic run's")
    else:
        timed = f"timed GEMMs: run {sc}"
        ok = False
    verdicts.append(f"{name}: {verdict}; {timed}")
print()
for v in verdicts:
    print(v)
sys.exit(0 if ok else 1)
PY
report_rc=$?
set -e
echo "($((SECONDS - started)) s; logs and events in $out)"
((report_rc == 0 && runs_failed == 0))
