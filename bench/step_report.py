"""Step-benchmark report for bench/gpu_step_bench.sh: turns a Tessera job's event
stream into one JSON line of step statistics, and prints the Markdown table
comparing it with bench/torch_baseline.py's lines.

    step_report.py tessera --events EVENTS.jsonl --jobspec SPEC.json [--mem MEM.csv --mem-baseline MiB] [--skip 5]
    step_report.py table LINES.jsonl...

`tessera`: EVENTS is the output of `tessera submit JOB --watch --json` (the
Job, then one JobEvent per line); SPEC the JobSpec as JSON (`tessera submit
JOB --dry-run --json`). Steps with index < --skip are warm-up (first-call
allocations, plan building, FP8 scale history) and are left out. step_ms is
the median of the job's own step_time_s (the slowest rank's compute time);
wall_step_ms is the median interval between consecutive step events, i.e.
including the coordinator. tokens_per_s counts every token of the batch
(micro_batch_size * seq_len * world_size) per median step, as the PyTorch
baseline does. gpu_used_mib is the peak of nvidia-smi's memory.used samples
(MEM, one MiB value per line) minus the value before the worker started.
With fp8.shadow_interval_steps, "shadow" gives the shadow steps, the median
time of one, their total time as a percentage of the steps' (cost_percent),
the last gap and how many steps warned.
Exits 1 (after printing a JSON line with "ok": false) unless the job
SUCCEEDED with at least one step after the warm-up.

`table`: every JSON line of the given files (Tessera's first), one row each;
the last column is Tessera's speed over that row's (>1: Tessera faster).
"""
import argparse
import json
import os
import sys

from job_events import read_job_events


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def model_label(model):
    kv = model.get("kv_heads", model.get("heads"))
    return (f"d{model['d_model']} L{model['layers']} h{model['heads']} kv{kv} "
            f"ffn{model['ffn']} V{model['vocab']} S{model['seq']}")


def tessera_stats(events_path, spec_path, mem_path, mem_baseline, skip):
    with open(spec_path) as f:
        spec = json.load(f)
    m, data = spec.get("model", {}), spec.get("data", {})
    model = {"vocab": m.get("vocab_size", 0), "d_model": m.get("d_model", 0), "layers": m.get("n_layers", 0),
             "heads": m.get("n_heads", 0), "kv_heads": m.get("n_kv_heads", 0) or m.get("n_heads", 0),
             "ffn": m.get("ffn_dim", 0), "seq": m.get("seq_len", 0)}
    batch = int(data.get("micro_batch_size", 0))
    world = int(spec.get("world_size", 1))
    events = read_job_events(events_path)
    steps = [dict(s, time_ms=s["_time_ms"]) for s in events.steps]
    state, reason, errors, job_id = events.state, events.reason, events.worker_errors, events.job_id
    result = {"impl": "tessera", "job": job_id, "model": model, "batch": batch, "world_size": world,
              "fp8": not spec.get("fp8", {}).get("disabled", False), "state": state, "steps_seen": len(steps)}
    timed = [s for s in steps if int(s.get("step", 0)) >= skip]  # proto JSON omits step 0's index
    if state != "SUCCEEDED" or not timed:
        if state is None:
            reason = "the job never ran (worker or coordinator failed: see their logs)"
        result.update(ok=False, reason=reason, worker_errors=errors[:3])
        return result, False
    step_s = median(float(s.get("step_time_s", 0)) for s in timed)
    by_index = sorted(steps, key=lambda s: int(s.get("step", 0)))
    intervals = [(b["time_ms"] - a["time_ms"]) / 1e3 for a, b in zip(by_index, by_index[1:])
                 if int(a.get("step", 0)) >= skip and int(b.get("step", 0)) == int(a.get("step", 0)) + 1]
    tokens = batch * model["seq"] * world
    result.update(ok=True, warmup_steps=skip, timed_steps=len(timed),
                  step_ms=round(step_s * 1e3, 3), step_ms_min=round(min(float(s["step_time_s"]) for s in timed) * 1e3, 3),
                  wall_step_ms=round(median(intervals) * 1e3, 3) if intervals else None,
                  tokens_per_s=round(tokens / step_s),
                  valid_tokens_per_step=int(timed[-1].get("tokens", 0)),
                  control_overhead_ms=round(median(float(s.get("control_overhead_s", 0)) for s in timed) * 1e3, 3),
                  loss_first=round(float(by_index[0].get("loss", 0)), 4),
                  loss_last=round(float(by_index[-1].get("loss", 0)), 4))
    # The step's own phase timing (slowest rank) and MFU, medians of the timed steps.
    phase_names = ("forward_s", "loss_s", "backward_s", "recompute_s", "optimizer_s", "collective_s",
                   "host_s")
    if any("phases" in s for s in timed):
        result["phases_ms"] = {name[:-2]: round(median(float(s.get("phases", {}).get(name, 0)) for s in timed) * 1e3, 3)
                               for name in phase_names}
    # Where the collectives' time was waited for (StepPhases.collective_waits).
    waits = [s.get("phases", {}).get("collective_waits") for s in timed]
    if any(isinstance(w, dict) for w in waits):
        sites = sorted({k for w in waits if isinstance(w, dict) for k in w})
        result["collective_waits_ms"] = {
            k[:-2]: round(median(float((w or {}).get(k, 0)) for w in waits) * 1e3, 3) for k in sites}
    if any("mfu" in s for s in timed):
        result["mfu"] = round(median(float(s.get("mfu", 0)) for s in timed), 4)
    # The bf16 shadow loss (fp8.shadow_interval_steps): its forwards are not
    # in step_time_s, so its cost is its total time spread over every step.
    shadows = [s["shadow"] for s in by_index if isinstance(s.get("shadow"), dict)]
    if shadows:
        shadow_s = [float(x.get("time_s", 0)) for x in shadows]
        result["shadow"] = {"steps": len(shadows), "ms_median": round(median(shadow_s) * 1e3, 3),
                            "cost_percent": round(100 * sum(shadow_s) / len(steps) / step_s, 3),
                            "gap_last": round(float(shadows[-1].get("gap", 0)), 5),
                            "warnings": sum(1 for x in shadows if x.get("warning"))}
    if mem_path and os.path.exists(mem_path):  # absent without nvidia-smi
        with open(mem_path) as f:
            samples = [float(x) for x in f.read().split() if x.replace(".", "", 1).isdigit()]
        if samples:
            result["gpu_used_mib"] = round(max(samples) - (mem_baseline or 0))
    return result, True


def table(lines):
    tessera = next((r for r in lines if r.get("impl") == "tessera" and r.get("ok")), None)
    out = ["| model | run | step ms | tokens/s | GPU memory MiB | Tessera speed / this |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in lines:
        label = model_label(r["model"]) + f" B{r['batch']}" if "model" in r else "?"
        if r.get("impl") == "tessera" and not r.get("ok"):
            out.append(f"| {label} | tessera | FAILED ({r.get('state')}: {str(r.get('reason', ''))[:50]}) | - | - | - |")
            continue
        ratio = "-"
        if tessera is not None and r is not tessera and r.get("step_ms"):
            ratio = f"{r['step_ms'] / tessera['step_ms']:.2f}x"
        mem = r.get("gpu_used_mib", "-")
        name = r["impl"] + (" (FP8)" if r.get("impl") == "tessera" and r.get("fp8") else "")
        out.append(f"| {label} | {name} | {r['step_ms']:.1f} | {r['tokens_per_s'] / 1e3:.1f}k | {mem} | {ratio} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tessera")
    t.add_argument("--events", required=True)
    t.add_argument("--jobspec", required=True)
    t.add_argument("--mem")
    t.add_argument("--mem-baseline", type=float, default=0.0)
    t.add_argument("--skip", type=int, default=5)
    tb = sub.add_parser("table")
    tb.add_argument("files", nargs="+")
    args = p.parse_args()
    if args.command == "tessera":
        result, ok = tessera_stats(args.events, args.jobspec, args.mem, args.mem_baseline, args.skip)
        print(json.dumps(result))
        return 0 if ok else 1
    lines = []
    for path in args.files:
        with open(path) as f:
            lines += [json.loads(l) for l in f if l.strip().startswith("{")]
    print(table(lines))
    for r in lines:
        if r.get("impl") == "tessera" and r.get("phases_ms"):
            phases = ", ".join(f"{k} {v:.2f}" for k, v in r["phases_ms"].items())
            mfu = f"; MFU {r['mfu'] * 100:.1f}%" if r.get("mfu") else ""
            print(f"\nTessera step phases (ms, median of timed steps, slowest rank): {phases}{mfu}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
