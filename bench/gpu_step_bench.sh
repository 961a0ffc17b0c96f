#!/usr/bin/env bash
# Tessera vs. PyTorch on one GPU, in the same device call: trains
# client/examples/gpu_job.yaml through a coordinator and a CUDA worker (the
# real product path: CLI -> coordinator -> worker), then runs the PyTorch
# baseline (bench/torch_baseline.py) on the same model and batch. Prints both
# throughputs. Run on the GPU host from an unpacked deploy/bundle.sh bundle:
#   bench/gpu_step_bench.sh BUNDLE_DIR JOB_YAML OUT_DIR
set -euo pipefail
bundle="$1"; job="$2"; out="$3"
source "$bundle/env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"

"$bundle/bin/tessera-coordinator" --listen=127.0.0.1:50071 --state_dir="$out/state" >"$out/coordinator.log" 2>&1 &
coordinator=$!
sleep 1
"$bundle/bin/tessera-worker" --coordinator=127.0.0.1:50071 --device=cuda:0 >"$out/worker.log" 2>&1 &
worker=$!
sleep 4
"$bundle/bin/tessera" submit "$job" --watch --coordinator=127.0.0.1:50071 | tee "$out/tessera.log" | tail -7
id=$(grep -o 'job-[0-9]*' "$out/tessera.log" | head -1)
"$bundle/bin/tessera" watch "$id" --json --coordinator=127.0.0.1:50071 >"$out/tessera_events.jsonl"
kill "$worker" "$coordinator"; wait || true

# Steady state: median step time of the steps after the first 20.
python3 - "$out/tessera_events.jsonl" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"step"' in l]
steps = [s for s in steps if s.get("step", 0) >= 20]
t = sorted(s["step_time_s"] for s in steps)
med = t[len(t) // 2]
tok = int(steps[0]["tokens"])
print(json.dumps({"tessera_step_ms": med * 1e3, "tokens_per_s": tok / med,
                  "control_overhead_ms": sorted(s.get("control_overhead_s", 0) for s in steps)[len(steps) // 2] * 1e3}))
PY
read -r v d l h f s b < <(python3 - "$job" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
get = lambda k: re.search(r"\b%s:\s*(\d+)" % k, text).group(1)
print(get("vocab_size"), get("d_model"), get("n_layers"), get("n_heads"), get("ffn_dim"),
      get("seq_len"), get("micro_batch_size"))
PY
)
python3 "$(dirname "$0")/torch_baseline.py" "$v" "$d" "$l" "$h" "$f" "$s" "$b" 50 | tee "$out/torch.json"
