#!/usr/bin/env bash
# From text to validation loss through the real processes: `tessera data
# tokenizer train` makes a BPE model, `tessera data text --tokenizer`
# encodes a training and a held-out file with it, the coordinator refuses a
# job whose model.vocab_size is below the tokenizer's, and a 2-worker CPU
# job with data.validation reports the validation loss on exactly the
# steps after which it evaluates, in `watch --json`, `status` and the
# `watch` summary; `tessera export --tokenizer` copies that tokenizer beside
# the weights and refuses another one.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-tessera}"
source "$root/tests/shell_stack.sh" tokval
tessera="$root/client/tessera"

corpus="$root/client/testdata/tokenizer_corpus.txt"
"$tessera" data tokenizer train --vocab_size 400 --out "$dir/tok.model" "$corpus" \
  >"$dir/train.log" 2>&1 || fail "tokenizer train: $(cat "$dir/train.log")"
grep -q "sentencepiece (vocab 400" "$dir/train.log" || fail "train output: $(cat "$dir/train.log")"
head -n 40 "$corpus" >"$dir/train.txt"
tail -n +41 "$corpus" >"$dir/val.txt"
for part in train val; do
  "$tessera" data text --tokenizer "$dir/tok.model" --out "$dir/$part.tok" "$dir/$part.txt" \
    >"$dir/$part.log" 2>&1 || fail "data text $part: $(cat "$dir/$part.log")"
done

start_coordinator
start_cpu_workers

job_file() {  # VOCAB
  cat <<JOB
name: tokval
model: {vocab_size: $1, d_model: 32, n_layers: 1, n_heads: 2, ffn_dim: 64, seq_len: 16}
data:
  token_file: $dir/train.tok
  micro_batch_size: 2
  validation: {token_file: $dir/val.tok, eval_interval_steps: 3, eval_batches: 2}
optimizer: {lr: 0.003, warmup_steps: 1}
world_size: 2
device_kind: CPU
steps: 7
seed: 5
checkpoint: {dir: $dir/ckpt, interval_steps: 7}
JOB
}

job_file 399 >"$dir/small.yaml"
if out=$("$tessera" submit "$dir/small.yaml" --coordinator="$addr" 2>&1); then
  fail "a vocabulary below the tokenizer's was accepted: $out"
fi
grep -q "model.vocab_size: 399" <<<"$out" || fail "refusal does not name model.vocab_size: $out"
grep -q "$dir/train.tok" <<<"$out" || fail "refusal does not name the file: $out"

job_file 400 >"$dir/job.yaml"
out=$("$tessera" submit "$dir/job.yaml" --coordinator="$addr") || fail "submit: $out"
job=$(grep -o 'job-[0-9]*' <<<"$out" | head -n 1)
"$tessera" watch "$job" --json --coordinator="$addr" >"$dir/events.json" \
  || fail "job did not succeed: $(tail -n 5 "$dir/events.json")"
/usr/bin/python3 - "$dir/events.json" <<'PY' || fail "validation steps"
import json, math, sys
steps, evaluated = set(), []
for line in open(sys.argv[1]):
    event = json.loads(line)
    if "step" not in event:
        continue
    m = event["step"]
    steps.add(m.get("step", 0))
    if "validation" in m:
        v = m["validation"]
        assert math.isfinite(v["loss"]) and v["loss"] > 0, v
        assert int(v["tokens"]) == 2 * 2 * 2 * 16, v  # batches x ranks x micro-batch x seq_len
        evaluated.append(m.get("step", 0))
assert steps == set(range(7)), steps
assert evaluated == [2, 5, 6], evaluated
PY
status=$("$tessera" status "$job" --coordinator="$addr") || fail "status: $status"
grep -q "validation loss .* after step 7" <<<"$status" || fail "status: $status"
summary=$("$tessera" watch "$job" --coordinator="$addr") || fail "watch: $summary"
grep -q "val [0-9]" <<<"$summary" || fail "watch progress line: $summary"
grep -q "validation   [0-9]" <<<"$summary" || fail "watch summary: $summary"

# The export carries the tokenizer that made the job's tokens, and only that one.
"$tessera" export "$dir/ckpt" --job "$dir/job.yaml" --out "$dir/hf" --tokenizer "$dir/tok.model" \
  >"$dir/export.log" 2>&1 || fail "export: $(cat "$dir/export.log")"
cmp -s "$dir/tok.model" "$dir/hf/tokenizer.model" || fail "tokenizer.model differs from tok.model"
"$tessera" data tokenizer train --vocab_size 350 --out "$dir/other.model" "$corpus" \
  >"$dir/other.log" 2>&1 || fail "second tokenizer: $(cat "$dir/other.log")"
if out=$("$tessera" export "$dir/ckpt" --job "$dir/job.yaml" --out "$dir/hf2" \
    --tokenizer "$dir/other.model" 2>&1); then
  fail "another tokenizer was copied: $out"
fi
grep -q "did not make the job's token file" <<<"$out" || fail "refusal: $out"
echo PASS
