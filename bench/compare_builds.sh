#!/usr/bin/env bash
# Two builds of Tessera on the same jobs, in one device call: for each
# round, each job runs through the product path (bench/gpu_step_bench.sh,
# Tessera only) with build A and then build B, so both see the same GPU,
# clocks and temperature. Prints one table of median step time, tokens/s,
# peak memory and the step's phases per build, job and round, and the
# change of B against A per job (median over rounds).
#
# A refactor that must not change speed is measured this way: the two
# builds' numbers are comparable only within one call.
#
# Usage, on the GPU host from the repository root:
#   bench/compare_builds.sh BUNDLE_A BUNDLE_B OUT_DIR JOB_FILE...
# BUNDLE_A may hold only bin/ (the libraries of BUNDLE_B are then used).
# Environment: ROUNDS (2), LABEL_A (A), LABEL_B (B), and what
# gpu_step_bench.sh reads (TESSERA_SKIP, TESSERA_TIMEOUT_S, ...).
set -uo pipefail
if [[ $# -lt 4 ]]; then
  echo "usage: $0 BUNDLE_A BUNDLE_B OUT_DIR JOB_FILE..." >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle_a="$(cd "$1" && pwd)"
bundle_b="$(cd "$2" && pwd)"
mkdir -p "$3"
out="$(cd "$3" && pwd)"
shift 3
jobs=("$@")
rounds="${ROUNDS:-2}"
label_a="${LABEL_A:-A}"
label_b="${LABEL_B:-B}"
# A bundle of binaries alone borrows the other's libraries and env.sh.
if [[ ! -f "$bundle_a/env.sh" ]]; then
  ln -sfn "$bundle_b/lib" "$bundle_a/lib"
  cp "$bundle_b/env.sh" "$bundle_a/env.sh"
fi
cd "$here/.."
failed=0
: >"$out/runs.jsonl"
for round in $(seq 1 "$rounds"); do
  for job in "${jobs[@]}"; do
    name="$(basename "$job" .yaml)"
    for side in a b; do
      if [[ $side == a ]]; then bundle="$bundle_a" label="$label_a"; else bundle="$bundle_b" label="$label_b"; fi
      dir="$out/$name-$label-r$round"
      if TORCH_MODES=none bench/gpu_step_bench.sh "$bundle" "$job" "$dir" >"$dir.log" 2>&1; then
        python3 - "$dir/tessera.json" "$label" "$name" "$round" >>"$out/runs.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r.update(build=sys.argv[2], job_file=sys.argv[3], round=int(sys.argv[4]))
print(json.dumps(r))
PY
        echo "$name $label round $round: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["step_ms"], "ms")' "$dir/tessera.json")"
      else
        echo "$name $label round $round: FAILED (log $dir.log)"
        tail -n 5 "$dir.log"
        failed=1
      fi
    done
  done
done
python3 - "$out/runs.jsonl" "$label_a" "$label_b" <<'PY' | tee "$out/table.md"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
a, b = sys.argv[2], sys.argv[3]
print("| job | build | round | step ms | tokens/s | GPU MiB | forward | loss | backward | optimizer | collective | host |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in runs:
    p = r.get("phases_ms", {})
    print(f"| {r['job_file']} | {r['build']} | {r['round']} | {r['step_ms']:.2f} | {r['tokens_per_s'] / 1e3:.1f}k | {r.get('gpu_used_mib', '-')} | "
          + " | ".join(f"{p.get(k, 0):.2f}" for k in ("forward", "loss", "backward", "optimizer", "collective", "host")) + " |")
print()
for job in sorted({r["job_file"] for r in runs}):
    ms = {s: [r["step_ms"] for r in runs if r["job_file"] == job and r["build"] == s] for s in (a, b)}
    if ms[a] and ms[b]:
        ma, mb = statistics.median(ms[a]), statistics.median(ms[b])
        print(f"{job}: {a} {ma:.2f} ms, {b} {mb:.2f} ms ({(mb - ma) / ma * 100:+.2f}%)")
PY
exit "$failed"
