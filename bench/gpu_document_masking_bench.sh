#!/usr/bin/env bash
# What document masking costs a step, through the product path: a local
# coordinator and one worker train JOB (bench/jobs/step_221m_documents.yaml,
# the 221M model at 8 x 2048 tokens) twice on the same token file and the
# same worker, with data.document_masking false and then true. The token
# file is made here, without Python: `tessera data synthetic
# --mean-document-tokens MEAN_DOCUMENT_TOKENS` records documents of random
# length averaging that many tokens (256: about 8 per 2048-token sequence).
# For each run the report gives the median step time (first SKIP steps left
# out), tokens/s, the median valid (scored) tokens per step, which masking
# lowers by about one per document boundary, and the run's state; then the
# masked run's step time against the unmasked one's.
#
#   bench/gpu_document_masking_bench.sh BUNDLE_DIR OUT_DIR
# Environment: JOB (bench/jobs/step_221m_documents.yaml), STEPS (30), SKIP
# (5), TOKENS (4194304 tokens in the file), MEAN_DOCUMENT_TOKENS (256),
# TIMEOUT_S (900 per run), TESSERA_DEVICE (cuda; cpu for a dry run of the
# plumbing with JOB=bench/jobs/dryrun_cpu_documents.yaml).
# Output: OUT_DIR/documents.tok, OUT_DIR/masking_{false,true}/events.jsonl,
# OUT_DIR/document_masking_report.json and OUT_DIR/table.md (printed).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/local_cluster.sh"
bench_dirs "$@"
job="${JOB:-$here/jobs/step_221m_documents.yaml}"
steps="${STEPS:-30}"
device="${TESSERA_DEVICE:-cuda}"
rc=0

tokens_file="$out/documents.tok"
bash -c 'source "$0/env.sh" && exec "$@"' "$bundle" tessera data synthetic --task addition \
  --tokens "${TOKENS:-4194304}" --seed 7 --mean-document-tokens "${MEAN_DOCUMENT_TOKENS:-256}" \
  --out "$tokens_file" || exit 1

cluster_start "$bundle" "$out" 1 "$device" || exit 1
for masking in false true; do
  run="$out/masking_$masking"
  mkdir -p "$run"
  sed -e "s/^steps: .*/steps: $steps/" -e "s/^name: .*/name: documents-masking-$masking/" \
    -e "s|^  token_file: .*|  token_file: $tokens_file|" \
    -e "s/^  document_masking: .*/  document_masking: $masking/" "$job" >"$run/job.yaml"
  [[ "$device" == cpu ]] && sed -i -e "s/^device_kind: .*/device_kind: CPU/" "$run/job.yaml"
  timeout "${TIMEOUT_S:-900}" "${in_bundle[@]}" tessera submit "$run/job.yaml" --watch --json \
    --coordinator="$cluster_addr" >"$run/events.jsonl" 2>"$run/submit.err" || rc=1
  echo "== document_masking $masking: $(tail -c 300 "$run/submit.err")"
done
cluster_stop

PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 - "$out" "${SKIP:-5}" >"$out/document_masking_report.json" <<'PY' || rc=1
import json, os, statistics, sys
from job_events import read_job_events
out, skip = sys.argv[1], int(sys.argv[2])
runs = []
for masking in ("false", "true"):
    run = os.path.join(out, "masking_" + masking)
    events = read_job_events(os.path.join(run, "events.jsonl"))
    steps, state, reason = events.steps, events.state, events.reason
    timed = [s for s in steps if int(s.get("step", 0)) >= skip]
    med = lambda key: statistics.median(float(s.get(key, 0)) for s in timed) if timed else None
    runs.append({
        "document_masking": masking == "true", "state": state,
        "reason": reason if state != "SUCCEEDED" else "", "steps": len(steps),
        "step_ms": round(med("step_time_s") * 1e3, 2) if timed else None,
        "tokens_per_s": round(med("tokens_per_s")) if timed else None,
        "valid_tokens_per_step": med("tokens") if timed else None,
        "loss_last": float(steps[-1].get("loss", 0)) if steps else None,
    })
json.dump({"runs": runs}, sys.stdout, indent=1)
print()
PY

python3 - "$out/document_masking_report.json" >"$out/table.md" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
base = runs[0]["step_ms"]
print("| document_masking | state | step ms | vs unmasked | tokens/s | valid tokens/step | last loss |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for r in runs:
    vs = f"{r['step_ms'] / base - 1:+.1%}" if base and r["step_ms"] else "-"
    print(f"| {str(r['document_masking']).lower()} | {r['state']} {r['reason'][:80]} | {r['step_ms']} | "
          f"{vs} | {r['tokens_per_s']} | {r['valid_tokens_per_step']} | {r['loss_last']} |")
PY
cat "$out/table.md"
exit "$rc"
