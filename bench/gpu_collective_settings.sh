#!/usr/bin/env bash
# Where multi-GPU efficiency goes, one setting at a time: Tessera FP8 trains
# the 221M job (or MODEL) on 1 GPU once, then on WORLD GPUs once per
# setting in SETTINGS, all in one call on one host, through
# bench/run_scaling_benchmarks.sh (PyTorch left out). A setting is
# "default" or space-free NAME=VALUE pairs joined by commas (for example
# NCCL_MAX_NCHANNELS=8 or NCCL_MIN_CTAS=2,NCCL_MAX_CTAS=2); the workers
# inherit them, so NCCL reads them when the communicators are made. The
# table gives per setting the step time, tokens/s per GPU, efficiency
# against the 1-GPU run, and the slowest rank's exposed collective wait,
# forward and backward phases, so a change that shortens the wait but slows
# the compute under overlap shows as such.
#
#   bench/gpu_collective_settings.sh BUNDLE_DIR OUT_DIR
# Environment: MODEL (221m), WORLD (4), SETTINGS ("default
# NCCL_MAX_NCHANNELS=16 NCCL_MAX_NCHANNELS=8 NCCL_MAX_NCHANNELS=4"),
# TESSERA_STEPS (25). A setting may be listed twice, to see the noise.
# Output: OUT_DIR/settings.md (printed) and one run_scaling_benchmarks.sh
# output folder per setting, numbered in the order they ran.
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUNDLE_DIR OUT_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$1"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
model="${MODEL:-221m}"
world="${WORLD:-4}"
settings=(${SETTINGS:-default NCCL_MAX_NCHANNELS=16 NCCL_MAX_NCHANNELS=8 NCCL_MAX_NCHANNELS=4})
common=(MODELS="$model" VARIANTS=fp8 FSDP2=0 TESSERA_STEPS="${TESSERA_STEPS:-25}")

env "${common[@]}" WORLDS=1 "$here/run_scaling_benchmarks.sh" "$bundle" "$out/one-gpu" \
  >"$out/one-gpu.txt" 2>&1 || echo "the 1-GPU run failed: $out/one-gpu.txt"
i=0
for setting in "${settings[@]}"; do
  i=$((i + 1))
  name="$i-${setting//[=,]/-}"  # numbered: a setting may run twice (noise)
  extra=()
  [[ "$setting" != default ]] && IFS=, read -r -a extra <<<"$setting"
  echo "== $setting ($(date -u +%H:%M:%S))"
  env "${common[@]}" "${extra[@]}" WORLDS="$world" "$here/run_scaling_benchmarks.sh" "$bundle" \
    "$out/$name" >"$out/$name.txt" 2>&1 || echo "FAILED: $setting ($out/$name.txt)"
done

python3 - "$out" "$world" "${settings[@]}" >"$out/settings.md" <<'PY'
import json, os, sys
out, world, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rows(folder):
    path = os.path.join(out, folder, "scaling.jsonl")
    return [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
one = rows("one-gpu")
base = one[0]["tokens_per_s_per_gpu"] if one else None
print(f"1 GPU: {base} tokens/s" + (f", step {one[0]['step_ms']} ms" if one else " (failed)"))
print()
print(f"| setting | GPUs | step ms | tokens/s/GPU | efficiency | collective wait ms | forward ms | backward ms |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
def line(name, r):
    ph = r.get("phases_ms") or {}
    eff = f"{r['tokens_per_s_per_gpu'] / base:.3f}" if base else "-"
    print(f"| {name} | {r['world']} | {r['step_ms']} | {r['tokens_per_s_per_gpu']} | {eff} | "
          f"{ph.get('collective', '-')} | {ph.get('forward', '-')} | {ph.get('backward', '-')} |")
if one:
    line("1 GPU", one[0])
for i, s in enumerate(settings, 1):
    r = [x for x in rows(f"{i}-" + s.replace("=", "-").replace(",", "-")) if x["world"] == world]
    if r:
        line(s, r[0])
    else:
        print(f"| {s} | {world} | failed | | | | | |")
PY
cat "$out/settings.md"
