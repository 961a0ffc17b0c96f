#!/usr/bin/env python3
"""Summarises a kernel profile of training steps (bench/profile_step.sh).

Reads Nsight Compute's raw CSV (one row per kernel launch, with
gpu__time_duration.sum), splits the launches into steps at the embedding
forward kernel, and prints for one whole step: the total GPU time, the time
per kernel name (count, total, share), and, with --sequence FILE, every
launch of that step in order with its grid and duration.
"""
import argparse
import collections
import csv
import sys

STEP_MARKER = "EmbeddingForwardKernel"


def short_name(name: str) -> str:
    base = name.split("(")[0]
    for prefix in ("void ", "tessera::cuda::", "tessera::cuda::(anonymous namespace)::"):
        base = base.replace(prefix, "")
    base = base.replace("(anonymous namespace)::", "")
    return base if len(base) <= 80 else base[:77] + "..."


def read_launches(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.reader(lines))
    header, body = rows[0], rows[2:]  # row 1 holds units
    col = {name: i for i, name in enumerate(header)}
    unit = rows[1][col["gpu__time_duration.sum"]]
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "ns": 1e-6, "us": 1e-3, "ms": 1.0}
    to_ms = scale.get(unit, 1e-6)
    out = []
    for r in body:
        try:
            ms = float(r[col["gpu__time_duration.sum"]].replace(",", "")) * to_ms
        except ValueError:
            continue
        out.append({"name": r[col["Kernel Name"]], "grid": r[col.get("Grid Size", 0)] if "Grid Size" in col else "",
                    "block": r[col["Block Size"]] if "Block Size" in col else "", "ms": ms})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv")
    ap.add_argument("--step", type=int, default=-2,
                    help="which step, counted from the step markers (default: the last whole one)")
    ap.add_argument("--sequence", help="write the step's launches in order to this file")
    args = ap.parse_args()
    launches = read_launches(args.csv)
    starts = [i for i, k in enumerate(launches) if STEP_MARKER in k["name"]]
    if len(starts) < 2:
        sys.exit(f"fewer than two steps in {args.csv} ({len(launches)} launches)")
    begin = starts[args.step]
    following = [s for s in starts if s > begin]
    end = following[0] if following else len(launches)
    step = launches[begin:end]
    total = sum(k["ms"] for k in step)
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for k in step:
        entry = by_name[short_name(k["name"])]
        entry[0] += 1
        entry[1] += k["ms"]
    print(f"# One step: {len(step)} kernel launches, {total:.2f} ms of kernel time\n")
    print("| kernel | launches | total ms | share |")
    print("| --- | ---: | ---: | ---: |")
    for name, (count, ms) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {count} | {ms:.3f} | {100 * ms / total:.1f}% |")
    if args.sequence:
        with open(args.sequence, "w") as f:
            acc = 0.0
            for k in step:
                acc += k["ms"]
                f.write(f"{acc:9.3f} {k['ms']:8.4f} grid={k['grid']} block={k['block']} {short_name(k['name'])}\n")


if __name__ == "__main__":
    main()
