#!/usr/bin/env python3
"""Helpers for bench/tokenize_bench.sh (Python standard library plus the
sentencepiece package, Debian's python3-sentencepiece).

  build-corpus OUT_DIR MIN_MB SOURCE...   text files Debian ships -> corpus
  anchor MODEL LIST_FILE                  time sentencepiece's encode
  compare MODEL TEXT TOKEN_FILE           same ids as `tessera data text`?

build-corpus reads every file under the sources (gzip or plain), keeps the
files that are valid UTF-8 without NUL bytes or U+2581 (SentencePiece's
whitespace mark, which no encoder keeps), writes them once into
OUT_DIR/base/part-NNN.txt (about 64 MB each), and links that set again
under OUT_DIR/copy-K/ until the corpus holds at least MIN_MB megabytes.
"""
import gzip
import os
import struct
import sys
import time


def read_text(path):
    with open(path, 'rb') as f:
        data = f.read()
    if data[:2] == b'\x1f\x8b':
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return None
    if b'\0' in data:
        return None
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError:
        return None
    if '\u2581' in text:
        return None
    return data


def build_corpus(out_dir, min_mb, sources):
    base = os.path.join(out_dir, 'base')
    os.makedirs(base)
    part, part_bytes, total, files, out = 0, 0, 0, 0, None
    for source in sources:
        for root, dirs, names in os.walk(source):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(root, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                data = read_text(path)
                if not data:
                    continue
                if not data.endswith(b'\n'):
                    data += b'\n'
                if out is None or part_bytes >= 64 << 20:
                    if out:
                        out.close()
                    out = open(os.path.join(base, 'part-%03d.txt' % part), 'wb')
                    part, part_bytes = part + 1, 0
                out.write(data)
                part_bytes += len(data)
                total += len(data)
                files += 1
    out.close()
    copies = 1
    while copies * total < min_mb * 1e6:
        copy = os.path.join(out_dir, 'copy-%d' % copies)
        os.makedirs(copy)
        for name in sorted(os.listdir(base)):
            os.symlink(os.path.join('..', 'base', name), os.path.join(copy, name))
        copies += 1
    print('corpus: %d files (%.1f MB of UTF-8 text) from %s, %d copies: %.1f MB'
          % (files, total / 1e6, ' '.join(sources), copies, copies * total / 1e6))


def corpus_files(list_file):
    with open(list_file) as f:
        return [line.rstrip('\n') for line in f if line.strip()]


def lines_of(path):
    with open(path, 'rb') as f:
        return f.read().decode('utf-8').splitlines(keepends=True)


def anchor(model, list_file):
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    files = corpus_files(list_file)
    total_bytes = total_tokens = 0
    elapsed = cpu = 0.0
    for path in files:
        lines = lines_of(path)  # reading is not timed
        start, start_cpu = time.perf_counter(), time.process_time()
        # The list form: one call, the loop in C++. Its num_threads defaults
        # to every core; one thread is the per-core anchor.
        ids = sp.encode(lines, num_threads=1)
        elapsed += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        total_bytes += sum(len(line.encode('utf-8')) for line in lines)
        total_tokens += sum(len(x) for x in ids)
    print('python3-sentencepiece %s: %.1f MB, %d tokens in %.1f s: %.2f MB/s on 1 thread; '
          '%.1f CPU s: %.2f MB per CPU-second'
          % (sentencepiece.__version__, total_bytes / 1e6, total_tokens, elapsed,
             total_bytes / 1e6 / elapsed, cpu, total_bytes / 1e6 / cpu))


def token_file_ids(path):
    with open(path, 'rb') as f:
        data = f.read()
    assert data[:8] == b'TSRTOKN\0', path
    version, dtype, count = struct.unpack_from('<IIQ', data, 8)
    offset = 80 if version >= 2 else 32
    width = 2 if dtype == 1 else 4
    return list(struct.unpack_from('<%d%s' % (count, 'H' if width == 2 else 'I'), data, offset))


def compare(model, text, token_file):
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    expected = [i for ids in sp.encode(lines_of(text)) for i in ids]
    got = token_file_ids(token_file)
    same = expected == got
    print('ids on the sample %s (%d tokens): %s' % (text, len(expected),
          'identical' if same else 'DIFFERENT (%d from tessera)' % len(got)))
    return 0 if same else 1


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == 'build-corpus':
        build_corpus(args[0], float(args[1]), args[2:])
    elif command == 'anchor':
        anchor(args[0], args[1])
    elif command == 'compare':
        sys.exit(compare(*args))
    else:
        sys.exit('unknown command ' + command)


if __name__ == '__main__':
    main()
