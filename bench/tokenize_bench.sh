#!/usr/bin/env bash
# Tokenizing at scale: `tessera data text` on a corpus of at least 1 GB, on
# each thread count of THREADS_LIST, against python3-sentencepiece's encode
# on one core on the same text with the same model. CPU only; the same
# script shows scaling on the 2-core development machine or a 16-core host.
#
# From a checkout (binaries from bazel-bin, built if absent):
#   bench/tokenize_bench.sh [WORK_DIR]          (default /tmp/tessera-tokenize-bench)
# From a relocatable bundle (deploy/bundle.sh OUT_DIR: OUT_DIR/bin, OUT_DIR/env.sh),
# with this script and tokenize_bench.py copied side by side anywhere:
#   BUNDLE=/opt/tessera THREADS_LIST="1 2 4 8 16" bash tokenize_bench.sh /tmp/tokbench
#
# Environment: BUNDLE (a bundle directory; its env.sh is sourced and
# BUNDLE/bin/tessera used), TESSERA (the tessera binary, default
# bazel-bin/client/tessera or BUNDLE/bin/tessera), THREADS_LIST (default
# "1 N" for N cores), CORPUS_MB (default 1000), VOCAB (default 8192),
# PYTHON (default /usr/bin/python3, Debian's, which python3-sentencepiece
# installs into).
#
# (a) The corpus is the text the OS ships: every file under /usr/share/doc
#     (changelogs and copyright files, most gzip), /usr/share/man (gzip man
#     pages) and /usr/share/common-licenses that is valid UTF-8, written
#     once and linked again as copies until it holds CORPUS_MB megabytes
#     (tokenize_bench.py build-corpus). Kept in WORK_DIR and reused.
# (b) A BPE model of VOCAB pieces is trained with `tessera data tokenizer
#     train` on the first 16 MB of the corpus, and reused.
# (c) `tessera data text --out DIR/` with --threads T for each T of
#     THREADS_LIST; wall and CPU seconds from bash's `time`.
# (d) python3-sentencepiece's encode of the same lines, one call per file
#     with num_threads=1 (its list form otherwise spreads over every core),
#     reading not timed: the one-core anchor.
# (e) The ids of both on a sample (the first 8 MB part) must be identical,
#     and every thread count must write the same files.
# Prints a markdown table; the logs are in WORK_DIR/logs.
set -euo pipefail
bench_dir=$(cd "$(dirname "$0")" && pwd)  # (a bundle's env.sh sets $here)
work=${1:-/tmp/tessera-tokenize-bench}
if [ -n "${BUNDLE:-}" ]; then
  # shellcheck disable=SC1091
  source "$BUNDLE/env.sh"
  tessera=${TESSERA:-$BUNDLE/bin/tessera}
else
  cd "$bench_dir/.."
  tessera=${TESSERA:-bazel-bin/client/tessera}
  if [ ! -x "$tessera" ]; then bazel build //client:tessera //client:tessera-sentencepiece; fi
fi
tessera=$(cd "$(dirname "$tessera")" && pwd)/$(basename "$tessera")
corpus_mb=${CORPUS_MB:-1000}
vocab=${VOCAB:-8192}
python=${PYTHON:-/usr/bin/python3}
cores=$(nproc)
threads_list=${THREADS_LIST:-"1 $cores"}
mkdir -p "$work/logs"
logs=$work/logs
helper_py=$bench_dir/tokenize_bench.py

# (a) corpus
if [ ! -f "$work/corpus.done" ]; then
  rm -rf "$work/corpus"
  "$python" "$helper_py" build-corpus "$work/corpus" "$corpus_mb" \
    /usr/share/doc /usr/share/man /usr/share/common-licenses | tee "$logs/corpus.log"
  touch "$work/corpus.done"
fi
find "$work/corpus" \( -type f -o -type l \) -name 'part-*.txt' | sort > "$work/files.list"
corpus_bytes=$(find -L "$work/corpus" -type f -name 'part-*.txt' -printf '%s\n' |
  awk '{ s += $1 } END { printf "%d", s }')

# (b) model
model=$work/bpe-$vocab.model
if [ ! -f "$model" ]; then
  head -c 16000000 "$work/corpus/base/part-000.txt" > "$work/train.txt"
  TIMEFORMAT='training took %R s'
  { time "$tessera" data tokenizer train --vocab_size "$vocab" --out "$model" \
      "$work/train.txt"; } > "$logs/train.log" 2>&1
  cat "$logs/train.log"
fi

# (c) tessera on each thread count; the directory is rewritten each time.
TIMEFORMAT='%R %U %S'
run_tessera() {
  local threads=$1
  rm -rf "$work/shards-$threads"
  { time "$tessera" data text --tokenizer "$model" --threads "$threads" \
      --out "$work/shards-$threads/" "$work/corpus" > "$logs/tessera-$threads.log" \
      2> "$logs/tessera-$threads.err"; } 2> "$logs/tessera-$threads.time"
  cat "$logs/tessera-$threads.log"
  echo "wall, user, system seconds: $(cat "$logs/tessera-$threads.time")"
}
for threads in $threads_list; do run_tessera "$threads"; done

# (d) the anchor
if "$python" -c 'import sentencepiece' 2> /dev/null; then
  "$python" "$helper_py" anchor "$model" "$work/files.list" | tee "$logs/python.log"
else
  echo "python3-sentencepiece is not installed (apt-get install python3-sentencepiece): no anchor" |
    tee "$logs/python.log"
fi

# (e) the same ids on a sample
head -c 8000000 "$work/corpus/base/part-000.txt" > "$work/sample.txt"
"$tessera" data text --tokenizer "$model" --out "$work/sample.tok" "$work/sample.txt" \
  > "$logs/sample.log"
if "$python" -c 'import sentencepiece' 2> /dev/null; then
  "$python" "$helper_py" compare "$model" "$work/sample.txt" "$work/sample.tok" |
    tee "$logs/compare.log"
fi
# Every thread count wrote the same files (shards and manifest).
first=$(echo "$threads_list" | awk '{print $1}')
digest() { (cd "$work/shards-$1" && sha256sum .manifest.json shard-*.tok | sha256sum); }
for threads in $threads_list; do
  if [ "$threads" = "$first" ]; then continue; fi
  if [ "$(digest "$threads")" = "$(digest "$first")" ]; then
    echo "files on $first and $threads threads: identical" | tee -a "$logs/compare.log"
  else
    echo "files on $first and $threads threads: DIFFERENT" | tee -a "$logs/compare.log"
  fi
done

# The table. MB/s from wall time; MB per CPU-second (user + system) is the
# per-core figure that stays fair when other work shares the machine.
rate() { sed -n 's/.* \([0-9.]*\) MB\/s.*/\1/p' "$1" | tail -1; }
mb=$(awk -v b="$corpus_bytes" 'BEGIN { printf "%.1f", b / 1e6 }')
py=$(rate "$logs/python.log")
py_cpu=$(sed -n 's/.* \([0-9.]*\) MB per CPU-second.*/\1/p' "$logs/python.log" | tail -1)
one=""
echo
echo "corpus $mb MB, model vocab $vocab, $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
echo
echo "| encoder | threads | MB/s | vs 1 thread | MB per CPU-second | vs python, per core |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for threads in $threads_list; do
  r=$(rate "$logs/tessera-$threads.log")
  read -r wall user sys < "$logs/tessera-$threads.time"
  cpu_rate=$(awk -v b="$corpus_bytes" -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", b / 1e6 / (u + s) }')
  if [ -z "$one" ]; then one=$r; fi
  vs_py="-"
  if [ -n "$py_cpu" ]; then vs_py=$(awk -v a="$cpu_rate" -v p="$py_cpu" 'BEGIN { printf "%.2fx", a / p }'); fi
  echo "| tessera data text | $threads | $r | $(awk -v a="$r" -v o="$one" 'BEGIN { printf "%.2fx", a / o }') | $cpu_rate | $vs_py |"
done
if [ -n "$py" ]; then echo "| python3-sentencepiece encode | 1 | $py | | $py_cpu | 1.00x |"; fi
