#!/usr/bin/env bash
# Tokenizing at scale: `tessera data text` on a corpus of at least 1 GB, on
# one thread and on every core, against python3-sentencepiece's encode in
# one process on the same text with the same model. CPU only; runs on the
# 2-core development machine or a 16-core GPU host alike.
#
#   bench/tokenize_bench.sh [WORK_DIR]    (default /tmp/tessera-tokenize-bench)
#
# Environment: TESSERA (default bazel-bin/client/tessera, built if absent),
# CORPUS_MB (default 1000), VOCAB (default 8192), PYTHON (default
# /usr/bin/python3, Debian's, which python3-sentencepiece installs into).
#
# (a) The corpus is the text Debian ships on this machine: every file under
#     /usr/share/doc (changelogs and copyright files, most gzip),
#     /usr/share/man (gzip man pages) and /usr/share/common-licenses that is
#     valid UTF-8, written once and linked again as copies until it holds
#     CORPUS_MB megabytes (bench/tokenize_bench.py build-corpus). Kept in
#     WORK_DIR and reused.
# (b) A BPE model of VOCAB pieces is trained with `tessera data tokenizer
#     train` on the first 16 MB of the corpus, and reused.
# (c) `tessera data text --out DIR/` with --threads 1 and with every core.
# (d) python3-sentencepiece's encode, single process, as the anchor.
# (e) The ids of both on a sample (the first 8 MB part) must be identical.
# Prints a markdown table; the logs are in WORK_DIR/logs.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/tessera-tokenize-bench}
tessera=${TESSERA:-bazel-bin/client/tessera}
corpus_mb=${CORPUS_MB:-1000}
vocab=${VOCAB:-8192}
python=${PYTHON:-/usr/bin/python3}
cores=$(nproc)
mkdir -p "$work/logs"
logs=$work/logs

if [ ! -x "$tessera" ]; then bazel build //client:tessera //client:tessera-sentencepiece; fi

# (a) corpus
if [ ! -f "$work/corpus.done" ]; then
  rm -rf "$work/corpus"
  "$python" bench/tokenize_bench.py build-corpus "$work/corpus" "$corpus_mb" \
    /usr/share/doc /usr/share/man /usr/share/common-licenses | tee "$logs/corpus.log"
  touch "$work/corpus.done"
fi
find "$work/corpus" \( -type f -o -type l \) -name 'part-*.txt' | sort > "$work/files.list"
corpus_bytes=$(find -L "$work/corpus" -type f -name 'part-*.txt' -printf '%s\n' | paste -sd+ | bc)

# (b) model
model=$work/bpe-$vocab.model
if [ ! -f "$model" ]; then
  head -c 16000000 "$work/corpus/base/part-000.txt" > "$work/train.txt"
  /usr/bin/time -f 'training took %e s' "$tessera" data tokenizer train --vocab_size "$vocab" \
    --out "$model" "$work/train.txt" 2>&1 | tee "$logs/train.log"
fi

# (c) tessera on 1 thread and on every core; the directory is rewritten each time.
run_tessera() {
  local threads=$1
  rm -rf "$work/shards-$threads"
  "$tessera" data text --tokenizer "$model" --threads "$threads" --out "$work/shards-$threads/" \
    "$work/corpus" > "$logs/tessera-$threads.log" 2> "$logs/tessera-$threads.err"
  cat "$logs/tessera-$threads.log"
}
run_tessera 1
if [ "$cores" -gt 1 ]; then run_tessera "$cores"; fi

# (d) the anchor
if "$python" -c 'import sentencepiece' 2> /dev/null; then
  "$python" bench/tokenize_bench.py anchor "$model" "$work/files.list" | tee "$logs/python.log"
else
  echo "python3-sentencepiece is not installed (apt-get install python3-sentencepiece): no anchor" |
    tee "$logs/python.log"
fi

# (e) the same ids on a sample
head -c 8000000 "$work/corpus/base/part-000.txt" > "$work/sample.txt"
"$tessera" data text --tokenizer "$model" --out "$work/sample.tok" "$work/sample.txt" \
  > "$logs/sample.log"
if "$python" -c 'import sentencepiece' 2> /dev/null; then
  "$python" bench/tokenize_bench.py compare "$model" "$work/sample.txt" "$work/sample.tok" |
    tee "$logs/compare.log"
fi
# The two tessera runs wrote the same shards.
if [ "$cores" -gt 1 ]; then
  if cmp -s <(cat "$work/shards-1"/shard-*.tok | sha256sum) \
            <(cat "$work/shards-$cores"/shard-*.tok | sha256sum); then
    echo "shards on 1 and $cores threads: identical" | tee -a "$logs/compare.log"
  else
    echo "shards on 1 and $cores threads: DIFFERENT" | tee -a "$logs/compare.log"
  fi
fi

# The table.
rate() { sed -n 's/.* \([0-9.]*\) MB\/s.*/\1/p' "$1" | tail -1; }
one=$(rate "$logs/tessera-1.log")
all=$(rate "$logs/tessera-$cores.log")
py=$(rate "$logs/python.log")
echo
echo "corpus $(echo "scale=1; $corpus_bytes / 1000000" | bc) MB, model vocab $vocab, $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
echo
echo "| encoder | threads | MB/s | MB/s per core |"
echo "| --- | ---: | ---: | ---: |"
echo "| tessera data text | 1 | $one | $one |"
if [ "$cores" -gt 1 ]; then
  echo "| tessera data text | $cores | $all | $(awk -v a="$all" -v c="$cores" 'BEGIN { printf "%.2f", a / c }') |"
fi
if [ -n "$py" ]; then echo "| python3-sentencepiece encode | 1 | $py | $py |"; fi
