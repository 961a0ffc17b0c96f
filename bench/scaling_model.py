"""Step time against world size, from one GPU's measured step and the bytes
Tessera's collectives move: a short, checkable calculation, not a simulator.

What moves (worker/trainer/train_step.cc, fsdp_collectives.cc), per step and
per rank, for a shard group of g ranks and r replica groups (world = g * r):
  all-gather  every block parameter once in forward, and again in backward
              for blocks 0 .. L-3 when resharding after forward (the last
              two are still in the double buffer); block linears as 1-byte
              FP8 codes (2-byte bf16 with FP8 off), norms, embedding and LM
              head as bf16. A ring all-gather sends (g-1)/g of the gathered
              bytes through each rank's link.
  reduce-scatter  every gradient once, fp32: (g-1)/g of 4 bytes a parameter.
  all-reduce  (hybrid sharding) the rank's fp32 gradient shard across the r
              replicas: 2 (r-1)/r of its bytes.
  small       [loss, tokens, grad norm] and every FP8 amax: latency only.

Overlap, as the step does it: block l+1's all-gather runs under block l's
forward, block l's reduce-scatter (and replica all-reduce) under block
l-1's backward. What cannot hide: the embedding's and block 0's first
all-gather, the last blocks' and the embedding's reduce-scatter at the end,
the small all-reduces, and any block whose communication outlasts its
compute. Per block, exposed = max(0, comm - compute). Hidden communication
is not free either: NCCL's kernels take SMs and memory bandwidth from the
compute they run beside, so a share of the hidden time (--overlap-cost) is
added to the compute. That share is the one parameter fitted to
measurements (--fit, by least squares on the relative step error). Its
default, 1.01, is the fit to the four 2 x H200 runs of edce8ed (221M and
1.1B, FP8 and bf16), the two default 221M FP8 runs on 4 x H200 of ded5b3e
and the two FP8 runs on 2 x H200 of 49e716b (bench/RESULTS.md): it
matches the 2-GPU runs within 2.3% and over-predicts the 4-GPU runs by
3.6%. The model's exposed time (its fixed tail) is about
half the collective wait those runs measured; the overlap cost absorbs the
rest. The optimizer runs on the rank's shard, so its time divides by g.

Link bandwidths are inputs: NVLink bus bandwidth per GPU inside a node
(default 360 GB/s, about what NCCL reaches on H100/H200 NVLink 4 for large
messages), and between nodes 400 Gb/s InfiniBand per GPU, taken as 45 GB/s
of bus bandwidth (a stated assumption: one 400G NIC per GPU at ~90%).
Shard groups stay inside a node (g <= 8); replica groups cross nodes,
except where the whole world is one node (hybrid sharding such as 2 x 4 on
8 GPUs, --shard-group), whose replica all-reduce runs over NVLink.

    scaling_model.py --job bench/jobs/step_221m.yaml --measured-1gpu STEP_JSON
    scaling_model.py --job ... --forward-ms F --loss-ms L --backward-ms B --optimizer-ms O
    scaling_model.py ... --measured MEASURED_JSONL   # compare with multi-GPU runs
    scaling_model.py --fit A/scaling.jsonl --fit B1/scaling.jsonl,B2/scaling.jsonl
                                                     # refit to calls A and B

STEP_JSON is the `tessera` line of bench/step_report.py (its phases_ms).
MEASURED_JSONL holds lines {"model": "221m"|..., "world": N, "impl":
"tessera-fp8"|"tessera-bf16", "tokens_per_s_per_gpu": X}; each is printed
beside the prediction with the error. --fit reads the scaling.jsonl of
bench/run_scaling_benchmarks.sh, one --fit per device call (the 1-GPU run
that a call's multi-GPU runs are predicted from must be of the same call),
and prints the refitted cost, every run against its refitted prediction,
and the projections at --worlds.
"""
import argparse
import json
import os
import sys


def load_job(path):
    """The few JobSpec fields the model needs, from a job YAML (flat parse:
    'key: value' lines; the bench job files are that simple)."""
    fields = {}
    section = None
    with open(path) as f:
        for raw in f:
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            key, _, value = line.strip().partition(":")
            value = value.strip()
            if indent == 0:
                section = key if not value else None
                if value:
                    fields[key] = value
            elif section:
                fields[f"{section}.{key}"] = value
    m = {
        "vocab": int(fields["model.vocab_size"]), "d": int(fields["model.d_model"]),
        "layers": int(fields["model.n_layers"]), "heads": int(fields["model.n_heads"]),
        "kv_heads": int(fields.get("model.n_kv_heads", 0) or fields["model.n_heads"]),
        "ffn": int(fields["model.ffn_dim"]), "seq": int(fields["model.seq_len"]),
        "batch": int(fields["data.micro_batch_size"]),
    }
    return m


def block_params(m):
    """(params of the four block linears, params of the two norms) of one block."""
    hd = m["d"] // m["heads"]
    qkv = (m["heads"] + 2 * m["kv_heads"]) * hd * m["d"]
    linears = qkv + m["d"] * m["d"] + 2 * m["ffn"] * m["d"] + m["d"] * m["ffn"]
    return linears, 2 * m["d"]


def gathered_bytes(m, fp8, reshard):
    """Bytes of full parameters all-gathered per step (before the (g-1)/g factor)."""
    linears, norms = block_params(m)
    per_block = linears * (1 if fp8 else 2) + norms * 2
    blocks = m["layers"] + (max(0, m["layers"] - 2) if reshard else 0)
    outer = (2 * m["vocab"] * m["d"] + m["d"]) * 2
    return per_block, blocks * per_block + outer


def total_params(m):
    linears, norms = block_params(m)
    return m["layers"] * (linears + norms) + 2 * m["vocab"] * m["d"] + m["d"]


def layout(world, shard_group=None, gpus_per_node=8):
    """(shard group g, replicas r) of `world` ranks: by default FSDP within a
    node and replicas across nodes (HSDP) once world > gpus_per_node; or
    the job's parallelism.shard_group_size, which must divide the world and
    stay inside a node."""
    g = min(world, gpus_per_node) if not shard_group or shard_group == world else shard_group
    if world % g or g > gpus_per_node:
        raise ValueError(f"shard group {g} must divide the world {world} and fit a node "
                         f"of {gpus_per_node} GPUs")
    return g, world // g


def predict(m, phases_ms, world, fp8=True, reshard=True, gpus_per_node=8,
            nvlink_gbs=360.0, ib_gbs=45.0, latency_us=25.0, overlap_cost=1.01,
            shard_group=None):
    """Predicted step ms and its parts for `world` GPUs laid out as
    layout() says. The replica all-reduce runs over NVLink when the whole
    world is one node (HSDP inside a node, such as 2 x 4 on 8 GPUs), over
    InfiniBand otherwise."""
    g, r = layout(world, shard_group, gpus_per_node)
    replica_gbs = nvlink_gbs if world <= gpus_per_node else ib_gbs
    L = m["layers"]
    fwd, loss, bwd, opt = (phases_ms[k] for k in ("forward", "loss", "backward", "optimizer"))
    per_block_ag, all_ag = gathered_bytes(m, fp8, reshard)
    linears, norms = block_params(m)
    ring = (g - 1) / g if g > 1 else 0.0
    lat = latency_us / 1e3 if g > 1 else 0.0
    ag_block_ms = per_block_ag * ring / (nvlink_gbs * 1e6) + lat
    rs_block_ms = (linears + norms) * 4 * ring / (nvlink_gbs * 1e6) + lat
    # Replica all-reduce of the rank's fp32 shard of a block.
    ar_block_ms = ((linears + norms) * 4 / g) * 2 * (r - 1) / r / (replica_gbs * 1e6) + (
        latency_us * 2 / 1e3 if r > 1 else 0.0)
    fwd_block, bwd_block = fwd / L, bwd / L
    exposed = 0.0
    hidden = 0.0
    # Forward: block 0's gather (and the embedding's) are exposed; the rest hide
    # under the previous block's forward unless they take longer.
    outer_ag_ms = (2 * m["vocab"] * m["d"] * 2) * ring / (nvlink_gbs * 1e6) + lat
    exposed += ag_block_ms + outer_ag_ms / 2  # embedding now; the LM head hides under the blocks
    exposed += (L - 1) * max(0.0, ag_block_ms - fwd_block)
    hidden += (L - 1) * min(ag_block_ms, fwd_block) + outer_ag_ms / 2
    # Backward: regather (when resharding) plus reduce-scatter plus replica
    # all-reduce of one block share the links under one block's backward.
    regather = ag_block_ms if reshard else 0.0
    bwd_comm = regather + rs_block_ms + ar_block_ms
    exposed += (L - 1) * max(0.0, bwd_comm - bwd_block)
    hidden += (L - 1) * min(bwd_comm, bwd_block)
    # The last block's gradients and the embedding's are reduced after the backward.
    outer_rs_ms = (m["vocab"] * m["d"] * 4) * ring / (nvlink_gbs * 1e6) + lat
    outer_ar_ms = (2 * m["vocab"] * m["d"] * 4 / g) * 2 * (r - 1) / r / (replica_gbs * 1e6) if r > 1 else 0.0
    exposed += rs_block_ms + ar_block_ms + outer_rs_ms + outer_ar_ms
    exposed += 2 * (lat + (latency_us * 2 / 1e3 if r > 1 else 0.0))  # scalars and amaxes
    step = fwd + loss + bwd + opt / g + exposed + overlap_cost * hidden
    tokens = m["batch"] * m["seq"]
    return {
        "world": world, "shard_group": g, "replicas": r, "step_ms": round(step, 2),
        "exposed_comm_ms": round(exposed, 2), "hidden_comm_ms": round(hidden, 2),
        "tokens_per_s_per_gpu": round(tokens / step * 1e3),
        "efficiency": round((fwd + loss + bwd + opt) / step, 4),
        "all_gather_bytes_per_step": int(all_ag * ring) if g > 1 else 0,
        "reduce_scatter_bytes_per_step": int(total_params(m) * 4 * ring) if g > 1 else 0,
    }


def fit_overlap_cost(points):
    """The overlap cost c that best fits measured multi-GPU steps. Each point
    is (fixed_ms, hidden_ms, measured_step_ms), where the model's step is
    fixed_ms + c * hidden_ms; c minimises the sum of squared relative step
    errors, sum(((fixed + c * hidden) / measured - 1) ** 2), which has a
    closed form. Never below 0; None without a point that hides anything."""
    num = sum(h / s * (1 - f / s) for f, h, s in points)
    den = sum((h / s) ** 2 for f, h, s in points)
    return max(0.0, num / den) if den > 0 else None


def call_points(rows, job_for, **link):
    """The multi-GPU Tessera runs of one device call (rows of
    run_scaling_benchmarks.sh's scaling.jsonl), each paired with the 1-GPU
    run of the same model and recipe in that call, whose phases the model
    starts from: a list of dicts with the row, its model config, the 1-GPU
    phases and the model's fixed and hidden ms at overlap cost 0 and 1.
    `job_for(row)` gives the row's job file. Rows without a 1-GPU partner
    are left out."""
    ones = {(r["model"], r["impl"]): r for r in rows
            if r.get("world") == 1 and r.get("impl", "").startswith("tessera") and r.get("phases_ms")}
    points = []
    for r in rows:
        one = ones.get((r.get("model"), r.get("impl")))
        if r.get("world", 1) <= 1 or one is None:
            continue
        m = load_job(job_for(r))
        kw = dict(fp8=r["impl"].endswith("fp8"), shard_group=r.get("shard_group"), **link)
        bare = predict(m, one["phases_ms"], r["world"], overlap_cost=0.0, **kw)
        measured = m["batch"] * m["seq"] / r["tokens_per_s_per_gpu"] * 1e3
        points.append({"row": r, "model": m, "phases_ms": one["phases_ms"],
                       "fixed_ms": bare["step_ms"], "hidden_ms": bare["hidden_comm_ms"],
                       "measured_step_ms": measured, "kw": kw})
    return points


def refit(calls, job_for, worlds, **link):
    """Fits the overlap cost to the multi-GPU runs of `calls` (each a list
    of scaling.jsonl rows from one device call) and returns (cost, per-run
    rows with the refitted prediction and its error, projections at
    `worlds` for each model and recipe of the last call that has them)."""
    points = [p for rows in calls for p in call_points(rows, job_for, **link)]
    cost = fit_overlap_cost([(p["fixed_ms"], p["hidden_ms"], p["measured_step_ms"])
                             for p in points])
    if cost is None:
        return None, [], []
    fitted = []
    for p in points:
        r = p["row"]
        pred = predict(p["model"], p["phases_ms"], r["world"], overlap_cost=cost, **p["kw"])
        fitted.append({"model": r["model"], "impl": r["impl"], "world": r["world"],
                       "shard_group": pred["shard_group"], "replicas": pred["replicas"],
                       "measured_tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
                       "tokens_per_s_per_gpu": pred["tokens_per_s_per_gpu"],
                       "error": round(pred["tokens_per_s_per_gpu"] / r["tokens_per_s_per_gpu"] - 1, 4)})
    projections, seen = [], set()
    for p in reversed(points):
        key = (p["row"]["model"], p["row"]["impl"])
        if key in seen:
            continue
        seen.add(key)
        for w in worlds:
            row = predict(p["model"], p["phases_ms"], w, fp8=p["kw"]["fp8"], overlap_cost=cost, **link)
            projections.append(dict(row, model=key[0], impl=key[1]))
    projections.sort(key=lambda r: (r["model"], r["impl"], r["world"]))
    return cost, fitted, projections


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job", help="a bench/jobs/*.yaml (not with --fit)")
    p.add_argument("--fit", action="append", metavar="CALL",
                   help="refit the overlap cost: the scaling.jsonl files of one device call, "
                        "comma-separated; repeat for each call. Each multi-GPU Tessera run is "
                        "predicted from its call's 1-GPU run of the same model and recipe")
    p.add_argument("--measured-1gpu", help="a tessera JSON line of step_report.py (phases_ms)")
    for name in ("forward", "loss", "backward", "optimizer"):
        p.add_argument(f"--{name}-ms", type=float)
    p.add_argument("--bf16", action="store_true", help="FP8 off: block linears gather as bf16")
    p.add_argument("--no-reshard", action="store_true", help="reshard_after_forward false")
    p.add_argument("--shard-group", type=int,
                   help="parallelism.shard_group_size (default: FSDP within a node, replicas across)")
    p.add_argument("--worlds", default="1,2,8,64,512")
    p.add_argument("--nvlink-gbs", type=float, default=360.0)
    p.add_argument("--ib-gbs", type=float, default=45.0)
    p.add_argument("--overlap-cost", type=float, default=1.01,
                   help="share of hidden communication time that slows the compute beside it")
    p.add_argument("--measured", help="JSON lines of multi-GPU measurements to compare")
    p.add_argument("--label", default="", help="model label matched against --measured lines")
    p.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    args = p.parse_args()
    worlds = [int(x) for x in args.worlds.split(",")]
    if args.fit:
        return print_refit(args, worlds)
    if not args.job:
        p.error("give --job, or --fit")
    m = load_job(args.job)
    if args.measured_1gpu:
        with open(args.measured_1gpu) as f:
            phases = json.loads([l for l in f if l.strip().startswith("{")][0])["phases_ms"]
    else:
        phases = {k: getattr(args, f"{k}_ms") for k in ("forward", "loss", "backward", "optimizer")}
        if any(v is None for v in phases.values()):
            p.error("give --measured-1gpu or all four --*-ms")
    fp8, reshard = not args.bf16, not args.no_reshard
    measured = []
    if args.measured:
        with open(args.measured) as f:
            measured = [json.loads(l) for l in f if l.strip().startswith("{")]
    impl = "tessera-bf16" if args.bf16 else "tessera-fp8"
    rows = []
    for w in worlds:
        try:
            row = predict(m, phases, w, fp8, reshard, nvlink_gbs=args.nvlink_gbs,
                          ib_gbs=args.ib_gbs, overlap_cost=args.overlap_cost,
                          shard_group=args.shard_group)
        except ValueError as e:
            p.error(f"--shard-group: {e}")
        for meas in measured:
            if meas.get("world") == w and meas.get("impl") == impl and meas.get("model", args.label) == args.label:
                row["measured_tokens_per_s_per_gpu"] = meas["tokens_per_s_per_gpu"]
                row["error"] = round(row["tokens_per_s_per_gpu"] / meas["tokens_per_s_per_gpu"] - 1, 4)
        rows.append(row)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{args.job} ({impl}, reshard {reshard}; NVLink {args.nvlink_gbs} GB/s, IB {args.ib_gbs} GB/s per GPU)")
    print("| GPUs | shard x replicas | step ms | exposed comm ms | tokens/s/GPU | efficiency | all-gather MB/step | measured | error |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        meas = r.get("measured_tokens_per_s_per_gpu")
        print(f"| {r['world']} | {r['shard_group']} x {r['replicas']} | {r['step_ms']} | {r['exposed_comm_ms']} | "
              f"{r['tokens_per_s_per_gpu']} | {r['efficiency']:.3f} | {r['all_gather_bytes_per_step'] / 1e6:.0f} | "
              f"{meas if meas else '-'} | {'%+.1f%%' % (100 * r['error']) if meas else '-'} |")
    return 0


def print_refit(args, worlds):
    """--fit: the refitted overlap cost, each run against its refitted
    prediction, and the projections at --worlds."""
    here = os.path.dirname(os.path.abspath(__file__))

    def job_for(row):
        job = row.get("job")
        return job if job and os.path.exists(job) else os.path.join(here, "jobs", f"step_{row['model']}.yaml")

    calls = []
    for call in args.fit:
        rows = []
        for path in call.split(","):
            with open(path) as f:
                rows += [json.loads(l) for l in f if l.strip().startswith("{")]
        calls.append(rows)
    link = dict(nvlink_gbs=args.nvlink_gbs, ib_gbs=args.ib_gbs)
    cost, fitted, projections = refit(calls, job_for, worlds, **link)
    if cost is None:
        print("no multi-GPU Tessera run with a 1-GPU run of the same model and recipe in its call",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"overlap_cost": round(cost, 4)}))
        for row in fitted + projections:
            print(json.dumps(row))
        return 0
    print(f"overlap cost refitted to {len(fitted)} multi-GPU runs: {cost:.3f} "
          f"(NVLink {args.nvlink_gbs} GB/s, IB {args.ib_gbs} GB/s per GPU)")
    print()
    print("| model | impl | GPUs | shard x replicas | measured tokens/s/GPU | refitted | error |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: |")
    for r in fitted:
        print(f"| {r['model']} | {r['impl']} | {r['world']} | {r['shard_group']} x {r['replicas']} | "
              f"{r['measured_tokens_per_s_per_gpu']} | {r['tokens_per_s_per_gpu']} | {100 * r['error']:+.1f}% |")
    print()
    print("| model | impl | GPUs | shard x replicas | step ms | exposed comm ms | tokens/s/GPU | efficiency |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for r in projections:
        print(f"| {r['model']} | {r['impl']} | {r['world']} | {r['shard_group']} x {r['replicas']} | "
              f"{r['step_ms']} | {r['exposed_comm_ms']} | {r['tokens_per_s_per_gpu']} | {r['efficiency']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
