"""PyTorch FSDP2 baseline for the scaling benchmark (bench/run_scaling_benchmarks.sh):
the model of bench/torch_baseline.py (same architecture, RoPE and GQA
included) sharded with torch.distributed.fsdp.fully_shard, one process per
GPU, bf16 parameters and fp32 gradient reduction (MixedPrecisionPolicy),
each block and then the root wrapped, as FSDP2 is usually applied; fused
AdamW with the job's hyperparameters and global-norm clipping. Every rank
trains on its own micro-batch of the job's size (the global batch grows
with the world size, as Tessera's does).

Launched once per world size:
    python3 -m torch.distributed.run --nproc_per_node=N bench/torch_fsdp_baseline.py \\
        --jobspec SPEC.json [--warmup 5] [--steps 15] [--json-out F] [--recompute blocks]
With --recompute blocks every block is wrapped in activation checkpointing
before it is sharded (the anchor for Tessera's memory.recompute BLOCKS).
Rank 0 prints one JSON line: step time (median of the timed steps, host
clock between synchronise-and-barrier pairs), tokens/s per GPU, peak memory,
first and last loss. The environment of the GPU hosts keeps NVLink
multicast off (NCCL_NVLS_ENABLE=0); this script does not change it.

`--device cpu` (gloo, fp32 optimizer without fusion, no memory figure) is
for dry runs on a machine without a GPU, through bench/cpu_dryrun.py where
the installed PyTorch lacks FSDP2; its timings mean nothing.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_baseline import Decoder, check_config, config_from_jobspec, loss_and_update  # noqa: E402


class CheckpointedBlock(torch.nn.Module):
    """A decoder block whose activations are recomputed in the backward: only
    its inputs are saved (torch.utils.checkpoint, non-reentrant)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x, cos, sin):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.block, x, cos, sin, use_reentrant=False)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobspec", required=True, help="JobSpec JSON (tessera submit JOB --dry-run --json)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json-out", help="rank 0 also appends its JSON line here")
    p.add_argument("--recompute", default="none", choices=("none", "blocks"),
                   help="blocks: activation checkpointing of every block (torch.utils.checkpoint, "
                        "non-reentrant), applied before fully_shard as torchtitan does")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cuda (NCCL); cpu (gloo) only for dry runs")
    args = p.parse_args()
    cfg = config_from_jobspec(args.jobspec)
    check_config(cfg)
    if args.steps < 1 or args.warmup < 1:
        p.error("--steps and --warmup must be >= 1")

    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_fsdp_baseline.py: no CUDA device", file=sys.stderr)
        return 1
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    if cuda:
        torch.cuda.set_device(local)
    device = f"cuda:{local}" if cuda else "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(args.seed)
    # Built on the GPU: an 8B model initialised on the host takes minutes.
    # (On the CPU there is nothing to move, and a dry run's PyTorch 1.13 has
    # no device context.)
    with torch.device(device) if cuda else contextlib.nullcontext():
        model = Decoder(cfg, device)
    n_params = sum(p.numel() for p in model.parameters())
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if args.recompute == "blocks":
        for i, block in enumerate(model.blocks):
            model.blocks[i] = CheckpointedBlock(block)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], weight_decay=cfg["weight_decay"],
                            **({"fused": True} if cuda else {}))
    gen = torch.Generator(device="cpu").manual_seed(args.seed * 1000 + rank)
    batches = [torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=gen).to(device)
               for _ in range(4)]

    def train_step(tokens):
        return loss_and_update(model(tokens[:, :-1]), tokens, model, opt, cfg)

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for i in range(args.warmup + args.steps):
        sync()
        dist.barrier()
        start = time.perf_counter()
        losses.append(train_step(batches[i % len(batches)]))
        sync()
        dist.barrier()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    losses = [float(l) for l in losses]
    if not all(math.isfinite(l) for l in losses):
        raise RuntimeError(f"non-finite loss {losses}")
    times.sort()
    median = times[len(times) // 2]
    if rank == 0:
        result = {"impl": "pytorch-fsdp2", "recompute": args.recompute, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(local) if cuda else "cpu",
                  "world": world, "model": {k: cfg[k] for k in ("vocab", "d_model", "layers", "heads", "kv_heads", "ffn", "seq")},
                  "batch": cfg["batch"], "params_M": round(n_params / 1e6, 2),
                  "step_ms": round(median * 1e3, 3), "step_ms_min": round(times[0] * 1e3, 3),
                  "tokens_per_s_per_gpu": round(cfg["batch"] * cfg["seq"] / median),
                  "peak_alloc_mib": round(torch.cuda.max_memory_allocated() / 2**20) if cuda else None,
                  "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4)}
        line = json.dumps(result)
        print(line, flush=True)
        if args.json_out:
            with open(args.json_out, "a") as f:
                f.write(line + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
