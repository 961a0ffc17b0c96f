#!/usr/bin/env bash
# Every execution plan cuDNN can make for our attention graphs, timed: for
# each shape and graph kind, bin/cudnn_attention_plans lists the candidates
# (the heuristics' configurations, then knob variants of the first) and
# times each against the default plan's outputs. A candidate that faults
# the device ends its process; the loop resumes at the next one. Prints a
# table per shape and kind, fastest first, and writes every line to
# OUT_DIR/SHAPE_KIND.jsonl.
#
# Usage, on the GPU host from the repository root:
#   bench/cudnn_attention_plans.sh BUNDLE_DIR OUT_DIR
# BUNDLE_DIR: deploy/bundle.sh OUT //bench:cudnn_attention_plans.
# Environment: SHAPES ("1,32,8,8192,128"), KINDS ("forward backward
# backward_atomic"), BUDGET_S (the whole run, 300), TESSERA_CUDNN_LIB_DIR
# (read by the bundle's env.sh: another cuDNN 9 to load).
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUNDLE_DIR OUT_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(cd "$1" && pwd)"
out="$2"
mkdir -p "$out"
source "$bundle/env.sh"
budget="${BUDGET_S:-300}"
start=$SECONDS
bin="$bundle/bin/cudnn_attention_plans"
for shape in ${SHAPES:-1,32,8,8192,128}; do
  for kind in ${KINDS:-forward backward backward_atomic}; do
    tag="${shape//,/x}_$kind"
    rm -f "$out/$tag.jsonl"
    if ! timeout 120 "$bin" --shape="$shape" --kind="$kind" --list >"$out/$tag.list.json" \
      2>"$out/$tag.err"; then
      echo "$tag: cannot list candidates"; cat "$out/$tag.err"; continue
    fi
    count="$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["candidates"]))' \
      "$out/$tag.list.json")"
    next=0
    while ((next < count)); do
      left=$((budget - (SECONDS - start)))
      if ((left < 20)); then
        echo "$tag: budget spent at candidate $next of $count"
        break
      fi
      timeout "$left" "$bin" --shape="$shape" --kind="$kind" --first="$next" \
        >>"$out/$tag.jsonl" 2>>"$out/$tag.err"
      rc=$?
      # Resume after the last candidate that printed its line.
      done_through="$(python3 -c '
import json, sys
last = -1
for line in open(sys.argv[1]):
    try:
        last = max(last, json.loads(line)["candidate"])
    except Exception:
        pass
print(last)' "$out/$tag.jsonl")"
      if ((rc == 0)); then break; fi
      if ((done_through + 1 <= next)); then
        # It died before printing this candidate's line: record and skip it.
        echo "{\"candidate\": $next, \"ok\": false, \"error\": \"process exit $rc\"}" >>"$out/$tag.jsonl"
        next=$((next + 1))
      else
        next=$((done_through + 1))
      fi
    done
    echo "== $shape $kind ($count candidates, $((SECONDS - start)) s)"
    python3 - "$out/$tag.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
good = sorted((r for r in rows if r.get("ok")), key=lambda r: r["ms"])
bad = [r for r in rows if not r.get("ok")]
print("| candidate | plan | ms | workspace MiB | rel diff to default | repeats bits |")
print("| ---: | --- | ---: | ---: | ---: | --- |")
for r in good:
    print(f"| {r['candidate']} | {r.get('description', '')} | {r['ms']:.3f} | "
          f"{r.get('workspace_bytes', 0) / 2**20:.1f} | {r.get('rel_diff', float('nan')):.2e} | "
          f"{r.get('repeat_bitwise_equal')} |")
print(f"{len(good)} ran, {len(bad)} did not plan or failed"
      + (": " + "; ".join(sorted({str(r.get('error', ''))[:80] for r in bad}))[:600] if bad else ""))
EOF
  done
done
