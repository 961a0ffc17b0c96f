#!/usr/bin/env python3
"""Compares an FP8 and a bf16 training run's loss curves (bench/loss_curves.sh).

Reads the two event streams of `tessera submit JOB --watch --json`, takes
each step's loss, and reports the largest relative gap |fp8 - bf16| / bf16
over all steps, the gap at the last step, and the gap between the means of
the last 10 steps (less sensitive to one noisy batch; both runs see the same
batches in the same order). Writes both curves to --json-out (one JSON line
per step) and prints a Markdown summary. Exits 1 if either run did not
succeed or the runs have different step counts.
"""
import argparse
import json
import sys


def step_losses(path):
    """{step: loss} and the job's last state from one event stream."""
    steps, state = {}, None
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if "step" in event and isinstance(event["step"], dict):
                steps[int(event["step"].get("step", 0))] = float(event["step"].get("loss", "nan"))
            elif "state_change" in event:
                state = event["state_change"].get("state", state)
    return steps, state


def losses(path):
    steps, state = step_losses(path)
    return [steps[k] for k in sorted(steps)], state


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fp8", required=True)
    ap.add_argument("--bf16", required=True)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    fp8, fp8_state = losses(args.fp8)
    bf16, bf16_state = losses(args.bf16)
    if fp8_state != "SUCCEEDED" or bf16_state != "SUCCEEDED" or len(fp8) != len(bf16) or not fp8:
        sys.exit(f"runs incomplete: fp8 {fp8_state} ({len(fp8)} steps), bf16 {bf16_state} ({len(bf16)} steps)")
    gaps = [abs(a - b) / b for a, b in zip(fp8, bf16)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    tail = min(10, len(fp8))
    tail_fp8, tail_bf16 = sum(fp8[-tail:]) / tail, sum(bf16[-tail:]) / tail
    if args.json_out:
        with open(args.json_out, "w") as f:
            for i, (a, b) in enumerate(zip(fp8, bf16)):
                f.write(json.dumps({"step": i, "fp8": a, "bf16": b}) + "\n")
    print(f"| steps | loss at the last step, FP8 / bf16 | gap at the last step | gap, mean of last {tail} | largest gap (step) |")
    print("| ---: | --- | ---: | ---: | --- |")
    print(f"| {len(fp8)} | {fp8[-1]:.4f} / {bf16[-1]:.4f} | {100 * gaps[-1]:.2f}% | "
          f"{100 * abs(tail_fp8 - tail_bf16) / tail_bf16:.2f}% | {100 * gaps[worst]:.2f}% (step {worst}) |")


if __name__ == "__main__":
    main()
