"""PyTorch baseline for the model-step benchmark (bench/gpu_step_bench.sh): what a
PyTorch user gets for the same model, batch and optimizer as a Tessera job.

The model does the same work as Tessera's decoder (worker/trainer): token
embedding; per block a pre-RMSNorm, one fused QKV projection whose output
columns are the nh query heads, then the nkv key heads, then the nkv value
heads (grouped-query attention, n_kv_heads); rotary embedding on the query
and key heads in the rotate-half convention (pairs (i, i + hd/2), freq_i =
theta^(-2i/hd), angle = s * freq_i for the token at position s, computed in
fp32 and rounded back to bf16, as worker/engine/cpu/rope.cc does); causal
SDPA with enable_gqa when nkv < nh; output projection; pre-RMSNorm SwiGLU
MLP; final RMSNorm and an untied LM head. Training: fp32 parameters with
bf16 autocast, full logits and an fp32 cross-entropy, global-norm gradient
clipping when the job asks for it, fused AdamW with the job's
hyperparameters.

Both eager and torch.compile (of the model, as in
/work/shared/anchors/torch_anchors.py) run in the same call, each on a fresh
model from the same seed and on the same batches. Each step is timed with
the host clock between two torch.cuda.synchronize() calls; the first
--warmup steps are not timed (for torch.compile they include compilation,
reported as first_step_s), the median of the next --steps is reported.
Prints one JSON line per mode: step time, tokens/s, torch's peak allocated
and reserved memory, and the GPU memory the process used (nvidia-smi before
CUDA starts vs. cudaMemGetInfo after the steps, so it includes the CUDA
context, like Tessera's figure in gpu_step_bench.sh).

    torch_baseline.py --jobspec SPEC.json [--modes eager,compile] [--warmup 5] [--steps 20] [--json-out F]
    torch_baseline.py --vocab 32768 --d-model 1024 --layers 12 --heads 16 --kv-heads 4 --ffn 2816 \
        --seq 2048 --batch 8

SPEC.json is a JobSpec as JSON (`tessera submit JOB --dry-run --json`), so
the model and batch come from the very file Tessera trains; flags override
it. `--device cpu` is for dry runs only (bench/cpu_dryrun.py).
"""
import argparse
import gc
import json
import math
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def rope_tables(seq, head_dim, theta, device):
    """cos and sin [seq, head_dim / 2] fp32 of angle s * theta^(-2i/head_dim)."""
    half = head_dim // 2
    inv_freq = torch.pow(torch.tensor(theta, dtype=torch.float32),
                         -2.0 * torch.arange(half, dtype=torch.float32) / head_dim)
    angle = torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return angle.cos().to(device), angle.sin().to(device)


def apply_rope(x, cos, sin):
    """Rotates x [B, S, heads, hd] by position: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
    for x1 = x[..., :hd/2], x2 = x[..., hd/2:], in fp32, returned in x's dtype."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    c, s = cos[:, None, :], sin[:, None, :]  # broadcast over batch and heads
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


class DecoderBlock(torch.nn.Module):
    def __init__(self, d_model, heads, kv_heads, ffn, eps):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d_model // heads
        self.attn_norm = torch.nn.RMSNorm(d_model, eps=eps)
        self.qkv = torch.nn.Linear(d_model, (heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.out_proj = torch.nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = torch.nn.RMSNorm(d_model, eps=eps)
        self.gate_up = torch.nn.Linear(d_model, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d_model, bias=False)

    def forward(self, x, cos, sin):
        batch, seq, width = x.shape
        nh, nkv = self.heads, self.kv_heads
        qkv = self.qkv(self.attn_norm(x)).view(batch, seq, nh + 2 * nkv, self.head_dim)
        qk = apply_rope(qkv[:, :, :nh + nkv], cos, sin)  # query and key heads, as Tessera's RopeForward
        q = qk[:, :, :nh].transpose(1, 2)
        k = qk[:, :, nh:].transpose(1, 2)
        v = qkv[:, :, nh + nkv:].transpose(1, 2)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nkv != nh)
        x = x + self.out_proj(attn.transpose(1, 2).reshape(batch, seq, width))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(torch.nn.Module):
    def __init__(self, cfg, device):
        super().__init__()
        self.embedding = torch.nn.Embedding(cfg["vocab"], cfg["d_model"])
        self.blocks = torch.nn.ModuleList(
            DecoderBlock(cfg["d_model"], cfg["heads"], cfg["kv_heads"], cfg["ffn"], cfg["norm_eps"])
            for _ in range(cfg["layers"]))
        self.final_norm = torch.nn.RMSNorm(cfg["d_model"], eps=cfg["norm_eps"])
        self.lm_head = torch.nn.Linear(cfg["d_model"], cfg["vocab"], bias=False)
        cos, sin = rope_tables(cfg["seq"], cfg["d_model"] // cfg["heads"], cfg["rope_theta"], device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.final_norm(x))


def config_from_jobspec(path):
    """Model, batch and optimizer from a JobSpec in proto JSON (omitted fields are 0:
    the proto's documented defaults apply)."""
    with open(path) as f:
        spec = json.load(f)
    m, data, opt = spec.get("model", {}), spec.get("data", {}), spec.get("optimizer", {})
    heads = int(m.get("n_heads", 0))
    return {
        "vocab": int(m.get("vocab_size", 0)), "d_model": int(m.get("d_model", 0)),
        "layers": int(m.get("n_layers", 0)), "heads": heads,
        "kv_heads": int(m.get("n_kv_heads", 0)) or heads, "ffn": int(m.get("ffn_dim", 0)),
        "seq": int(m.get("seq_len", 0)), "batch": int(data.get("micro_batch_size", 0)),
        "norm_eps": float(m.get("norm_eps", 0)) or 1e-5, "rope_theta": float(m.get("rope_theta", 0)) or 10000.0,
        "lr": float(opt.get("lr", 0)) or 1e-4, "beta1": float(opt.get("beta1", 0)) or 0.9,
        "beta2": float(opt.get("beta2", 0)) or 0.95, "eps": float(opt.get("eps", 0)) or 1e-8,
        "weight_decay": float(opt.get("weight_decay", 0)), "grad_clip": float(opt.get("grad_clip_norm", 0)),
        "world_size": int(spec.get("world_size", 1)),
    }


def check_config(cfg):
    for key in ("vocab", "d_model", "layers", "heads", "kv_heads", "ffn", "seq", "batch"):
        if cfg[key] < 1:
            raise ValueError(f"{key} must be >= 1 (got {cfg[key]}): pass --jobspec or the flag")
    if cfg["d_model"] % cfg["heads"] or (cfg["d_model"] // cfg["heads"]) % 2:
        raise ValueError("d_model / heads must be an even integer (RoPE)")
    if cfg["heads"] % cfg["kv_heads"]:
        raise ValueError("kv_heads must divide heads")


def loss_and_update(logits, tokens, model, opt, cfg):
    """fp32 cross-entropy of next-token logits, backward, global-norm clipping
    when the job asks for it, one optimizer step; returns the loss."""
    loss = F.cross_entropy(logits.float().view(-1, cfg["vocab"]), tokens[:, 1:].reshape(-1))
    loss.backward()
    if cfg["grad_clip"] > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def gpu_memory_used_mib():
    """Memory in use on GPU 0 by every process, from nvidia-smi (None if unavailable)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=30)
        return float(out.stdout.split()[0]) if out.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def run_mode(mode, cfg, batches, args, device, baseline_mib):
    cuda = device.startswith("cuda")
    torch.manual_seed(args.seed)
    model = Decoder(cfg, device).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], weight_decay=cfg["weight_decay"], **({"fused": True} if cuda else {}))
    step_model = torch.compile(model) if mode == "compile" else model

    def train_step(tokens):
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16):
            logits = step_model(tokens[:, :-1])
        return loss_and_update(logits, tokens, model, opt, cfg)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, losses, first_step_s = [], [], None
    for i in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        losses.append(train_step(batches[i % len(batches)]))
        sync()
        elapsed = time.perf_counter() - start
        if i == 0:
            first_step_s = elapsed
        if i >= args.warmup:
            times.append(elapsed)
    losses = [float(l) for l in losses]
    if not all(math.isfinite(l) for l in losses):
        raise RuntimeError(f"{mode}: non-finite loss {losses}")
    times.sort()
    median = times[len(times) // 2]
    tokens = cfg["batch"] * cfg["seq"]
    result = {"impl": f"pytorch-{mode}", "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0) if cuda else "cpu",
              "model": {k: cfg[k] for k in ("vocab", "d_model", "layers", "heads", "kv_heads", "ffn", "seq")},
              "batch": cfg["batch"], "params_M": round(n_params / 1e6, 2),
              "warmup_steps": args.warmup, "timed_steps": args.steps,
              "step_ms": round(median * 1e3, 3), "step_ms_min": round(times[0] * 1e3, 3),
              "tokens_per_s": round(tokens / median), "first_step_s": round(first_step_s, 2),
              "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4)}
    if cuda:
        free, total = torch.cuda.mem_get_info()
        result["peak_alloc_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
        result["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / 2**20)
        if baseline_mib is not None:
            result["gpu_used_mib"] = round((total - free) / 2**20 - baseline_mib)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobspec", help="JobSpec JSON (tessera submit JOB --dry-run --json)")
    for flag, key in (("--vocab", "vocab"), ("--d-model", "d_model"), ("--layers", "layers"),
                      ("--heads", "heads"), ("--kv-heads", "kv_heads"), ("--ffn", "ffn"),
                      ("--seq", "seq"), ("--batch", "batch")):
        p.add_argument(flag, dest=key, type=int, help="overrides the jobspec")
    p.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per mode (compile happens here)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per mode")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json-out", help="also append the JSON lines here")
    p.add_argument("--device", default="cuda", help="cuda; cpu only for dry runs")
    args = p.parse_args()

    cfg = config_from_jobspec(args.jobspec) if args.jobspec else {
        "vocab": 0, "d_model": 0, "layers": 0, "heads": 0, "kv_heads": 0, "ffn": 0, "seq": 0, "batch": 0,
        "norm_eps": 1e-5, "rope_theta": 10000.0, "lr": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
        "weight_decay": 0.0, "grad_clip": 1.0, "world_size": 1}
    for key in ("vocab", "d_model", "layers", "heads", "kv_heads", "ffn", "seq", "batch"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if not cfg["kv_heads"]:
        cfg["kv_heads"] = cfg["heads"]
    check_config(cfg)
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in ("eager", "compile") for m in modes) or args.steps < 1 or args.warmup < 1:
        p.error("--modes takes eager and/or compile; --steps and --warmup must be >= 1")
    if cfg["world_size"] != 1:
        print(f"note: the job has world_size {cfg['world_size']}; this baseline is one GPU with the "
              "per-rank micro-batch", file=sys.stderr)

    baseline_mib = gpu_memory_used_mib() if args.device.startswith("cuda") else None  # before CUDA starts
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_baseline.py: no CUDA device", file=sys.stderr)
        return 1
    gen = torch.Generator().manual_seed(args.seed)
    batches = torch.randint(0, cfg["vocab"], (min(args.warmup + args.steps, 16), cfg["batch"], cfg["seq"] + 1),
                            generator=gen).to(args.device)
    for mode in modes:
        result = run_mode(mode, cfg, batches, args, args.device, baseline_mib)
        gc.collect()  # the mode's model and optimizer state go before the next mode starts
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        line = json.dumps(result)
        print(line, flush=True)
        if args.json_out:
            with open(args.json_out, "a") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
