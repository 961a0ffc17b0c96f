#!/usr/bin/env bash
# The one command for a GPU device call: the GPU's nvidia-smi line, the
# attention benchmark (bench/attention_bench.py: Tessera's attention checked
# against an fp32 reference, then timed against SDPA flash and cuDNN), then
# the model-step benchmark on the 221M model (bench/gpu_step_bench.sh with
# bench/jobs/step_221m.yaml: Tessera through coordinator + worker + CLI,
# then PyTorch eager and torch.compile), and its GQA variant
# (step_221m_gqa.yaml) when the time budget allows. Every stage logs under
# OUT_DIR; a stage that fails is reported and the next one still runs. A
# short summary (stage results and the tables) is printed last; the exit
# code is 0 only if every stage that ran passed.
#
# Usage, on the GPU host from the repository root:
#   bench/run_attention_and_step.sh BUNDLE OUT_DIR
# BUNDLE is a deploy/bundle.sh directory built with //bench:attention_bench,
# or that directory packed as .tar.xz (unpacked here into /tmp).
# Environment: BENCH_BUDGET_S (480): the whole run's target; the GQA step
# benchmark starts only if 200 s of it are left (RUN_GQA=yes forces it,
# RUN_GQA=no skips it). For a dry run without a GPU (bench/README.md):
# PYTHON, ATTENTION_ARGS (appended to attention_bench.py's), STEP_JOB and
# GQA_JOB (the two job files), and gpu_step_bench.sh's variables.
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUNDLE_DIR|BUNDLE.tar.xz OUT_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(realpath -e "$1")" || { echo "FAILED: no bundle at $1"; exit 1; }
mkdir -p "$2"
out="$(cd "$2" && pwd)"
cd "$here/.."
budget="${BENCH_BUDGET_S:-480}"
read -r -a python <<<"${PYTHON:-python3}"
read -r -a attention_args <<<"${ATTENTION_ARGS:-}"
step_job="${STEP_JOB:-bench/jobs/step_221m.yaml}"
gqa_job="${GQA_JOB:-bench/jobs/step_221m_gqa.yaml}"
start=$SECONDS

if [[ -f "$bundle" ]]; then
  dest="$(mktemp -d /tmp/tessera-bundle.XXXXXX)"
  trap 'rm -rf "$dest"' EXIT
  tar -C "$dest" -xJf "$bundle" || { echo "FAILED: cannot unpack $bundle"; exit 1; }
  envsh="$(find "$dest" -maxdepth 3 -name env.sh | head -1)"
  [[ -n "$envsh" ]] || { echo "FAILED: no env.sh in $bundle"; exit 1; }
  bundle="$(dirname "$envsh")"
fi
if [[ ! -x "$bundle/bin/attention_bench" || ! -x "$bundle/bin/tessera-worker" ]]; then
  echo "FAILED: $bundle lacks bin/attention_bench or bin/tessera-worker" \
    "(deploy/bundle.sh OUT //bench:attention_bench)"
  exit 1
fi

results=()
failed=0
record() {  # record NAME RC
  if (($2 == 0)); then
    results+=("$1: ok")
  else
    results+=("$1: FAILED (exit $2$( (($2 == 124)) && echo ', timed out'))")
    failed=1
  fi
}

# ---- The GPU ----
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1 ||
  echo "no nvidia-smi" >"$out/gpu.txt"
gpu_line="$(head -1 "$out/gpu.txt")"
"${python[@]}" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >>"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

# ---- Attention ----
echo "== attention ($((SECONDS - start)) s)"
rm -f "$out/attention_table.md"
timeout 180 "${python[@]}" bench/attention_bench.py --binary "$bundle/bin/attention_bench" \
  --lib-path "$bundle/lib:/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64" \
  --json-out "$out/attention.json" --table-out "$out/attention_table.md" \
  --log "$out/attention_binary.log" "${attention_args[@]}" 2>&1 | tee "$out/attention.log"
record attention "${PIPESTATUS[0]}"

# ---- Model step: 221M, then its GQA variant if there is time ----
step() {  # step NAME JOB TIMEOUT_S
  echo "== step $1: $2 ($((SECONDS - start)) s)"
  rm -rf "${out:?}/$1"
  TESSERA_TIMEOUT_S=150 TORCH_TIMEOUT_S=200 timeout "$3" bench/gpu_step_bench.sh "$bundle" "$2" "$out/$1" \
    2>&1 | tee "$out/$1.log"
  record "step $1" "${PIPESTATUS[0]}"
}
step step_221m "$step_job" 360
left=$((budget - (SECONDS - start)))
case "${RUN_GQA:-auto}" in
  yes) step step_221m_gqa "$gqa_job" 360 ;;
  no) results+=("step step_221m_gqa: skipped (RUN_GQA=no)") ;;
  *)
    if ((left >= 200)); then
      step step_221m_gqa "$gqa_job" $((left - 10 > 360 ? 360 : left - 10))
    else
      results+=("step step_221m_gqa: skipped (${left} s of the ${budget} s budget left; RUN_GQA=yes forces it)")
    fi
    ;;
esac

# ---- Summary ----
{
  echo
  echo "== summary ($((SECONDS - start)) s): $gpu_line"
  printf '%s\n' "${results[@]}"
  if [[ -s "$out/attention_table.md" ]]; then
    echo
    echo "Attention (causal; Tessera checked against an fp32 reference first):"
    cat "$out/attention_table.md"
  fi
  for d in step_221m step_221m_gqa; do
    if [[ -s "$out/$d/table.md" ]]; then
      echo
      echo "Model step ($d):"
      cat "$out/$d/table.md"
    fi
  done
} | tee "$out/summary.md"
exit "$failed"
