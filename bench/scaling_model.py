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
added to the compute. Its default, 0.8, is the one parameter fitted to
measurements: the four 2 x H200 runs (221M and 1.1B, FP8 and bf16) of
bench/RESULTS.md, which it then matches within 2% in tokens/s per GPU. The
model's exposed time (its fixed tail) is about half the collective wait
those runs measured; the overlap cost absorbs the rest. The optimizer runs
on the rank's shard, so its time divides by g.

Link bandwidths are inputs: NVLink bus bandwidth per GPU inside a node
(default 360 GB/s, about what NCCL reaches on H100/H200 NVLink 4 for large
messages), and between nodes 400 Gb/s InfiniBand per GPU, taken as 45 GB/s
of bus bandwidth (a stated assumption: one 400G NIC per GPU at ~90%).
Shard groups stay inside a node (g <= 8); replica groups cross nodes.

    scaling_model.py --job bench/jobs/step_221m.yaml --measured-1gpu STEP_JSON
    scaling_model.py --job ... --forward-ms F --loss-ms L --backward-ms B --optimizer-ms O
    scaling_model.py ... --measured MEASURED_JSONL   # compare with multi-GPU runs

STEP_JSON is the `tessera` line of bench/step_report.py (its phases_ms).
MEASURED_JSONL holds lines {"model": "221m"|..., "world": N, "impl":
"tessera-fp8"|"tessera-bf16", "tokens_per_s_per_gpu": X}; each is printed
beside the prediction with the error.
"""
import argparse
import json
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


def predict(m, phases_ms, world, fp8=True, reshard=True, gpus_per_node=8,
            nvlink_gbs=360.0, ib_gbs=45.0, latency_us=25.0, overlap_cost=0.8):
    """Predicted step ms and its parts for `world` GPUs: FSDP within a node,
    replicas across nodes (HSDP) once world > gpus_per_node."""
    g = min(world, gpus_per_node)
    r = max(1, world // g)
    L = m["layers"]
    fwd, loss, bwd, opt = (phases_ms[k] for k in ("forward", "loss", "backward", "optimizer"))
    per_block_ag, all_ag = gathered_bytes(m, fp8, reshard)
    linears, norms = block_params(m)
    ring = (g - 1) / g if g > 1 else 0.0
    lat = latency_us / 1e3 if g > 1 else 0.0
    ag_block_ms = per_block_ag * ring / (nvlink_gbs * 1e6) + lat
    rs_block_ms = (linears + norms) * 4 * ring / (nvlink_gbs * 1e6) + lat
    # Replica all-reduce of the rank's fp32 shard of a block, over InfiniBand.
    ar_block_ms = ((linears + norms) * 4 / g) * 2 * (r - 1) / r / (ib_gbs * 1e6) + (
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
    outer_ar_ms = (2 * m["vocab"] * m["d"] * 4 / g) * 2 * (r - 1) / r / (ib_gbs * 1e6) if r > 1 else 0.0
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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job", required=True, help="a bench/jobs/*.yaml")
    p.add_argument("--measured-1gpu", help="a tessera JSON line of step_report.py (phases_ms)")
    for name in ("forward", "loss", "backward", "optimizer"):
        p.add_argument(f"--{name}-ms", type=float)
    p.add_argument("--bf16", action="store_true", help="FP8 off: block linears gather as bf16")
    p.add_argument("--no-reshard", action="store_true", help="reshard_after_forward false")
    p.add_argument("--worlds", default="1,2,8,64,512")
    p.add_argument("--nvlink-gbs", type=float, default=360.0)
    p.add_argument("--ib-gbs", type=float, default=45.0)
    p.add_argument("--overlap-cost", type=float, default=0.8,
                   help="share of hidden communication time that slows the compute beside it")
    p.add_argument("--measured", help="JSON lines of multi-GPU measurements to compare")
    p.add_argument("--label", default="", help="model label matched against --measured lines")
    p.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    args = p.parse_args()
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
    for w in (int(x) for x in args.worlds.split(",")):
        row = predict(m, phases, w, fp8, reshard, nvlink_gbs=args.nvlink_gbs, ib_gbs=args.ib_gbs,
                      overlap_cost=args.overlap_cost)
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


if __name__ == "__main__":
    sys.exit(main())
