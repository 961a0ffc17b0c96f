"""A Llama forward pass written from the Hugging Face definition, in torch,
over a Tessera export; compared with Tessera's logits for the same prompt.

Reads DIR/config.json and DIR/model.safetensors (F32 or BF16, read with json
and numpy as any safetensors reader would), runs LlamaForCausalLM's
forward (RMSNorm with the weight applied after normalising, q/k/v and
gate/up projections, RoPE with rotate_half, causal grouped-query attention,
SwiGLU, untied LM head) in float64, and compares the logits of PROMPT with
the float32 logits Tessera wrote:

  - emulating the CPU engine's storage precision: its compute weights are
    the master weights rounded to bf16, the activations it stores between
    operations are rounded to bf16 (norm outputs, the q/k/v and gate/up
    projections, RoPE, attention, SwiGLU) and the residual stream to fp32
    (o_proj and down_proj add into it straight from their fp32 GEMM). Must agree within
    --tolerance (default 1e-4), the largest absolute difference;
  - plain float64 with the fp32 weights (what another framework loading the
    export computes): must agree within --plain_tolerance (default 5e-2),
    which bf16 activations allow and a swapped or misplaced tensor far
    exceeds. Subtler mistakes (another RoPE pairing) only the emulated
    comparison catches.

Usage: hf_reference_forward.py DIR PROMPT_FILE(int32) LOGITS_FILE(float32 [n, vocab])
Prints both differences; exits 0 when both hold.
"""
import argparse
import json
import os
import struct

import numpy as np
import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        if info["dtype"] == "F32":
            array = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit("unexpected dtype " + info["dtype"])
        tensors[name] = torch.from_numpy(array.reshape(info["shape"]).astype(np.float64))
    return tensors


def bf16(x):
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)


def fp32(x):
    return x.to(torch.float32).to(torch.float64)


def identity(x):
    return x


def rms_norm(x, weight, eps):
    # HF: x * rsqrt(mean(x^2) + eps), then the weight.
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def rope_tables(seq, head_dim, theta, emulate):
    half = head_dim // 2
    i = torch.arange(half, dtype=torch.float32)
    if emulate:
        # The engine's fp32 arithmetic: theta^(-2i/hd), position * that, cos/sin.
        inv_freq = torch.pow(torch.tensor(theta, dtype=torch.float32), -2.0 * i / head_dim)
        angle = torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]
        return angle.cos().double(), angle.sin().double()
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angle.cos(), angle.sin()


def rotate(x, cos, sin):
    # x [heads, seq, hd]: x * cos + rotate_half(x) * sin, cos/sin repeated over halves.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def forward(config, w, ids, emulate):
    store = bf16 if emulate else identity      # activations the engine stores in bf16
    residual = fp32 if emulate else identity   # its fp32 residual stream
    weight = (lambda name: bf16(w[name])) if emulate else (lambda name: w[name])
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hidden = config["hidden_size"]
    hd = config.get("head_dim", hidden // heads)
    eps, theta = config["rms_norm_eps"], config["rope_theta"]
    seq = len(ids)
    cos, sin = rope_tables(seq, hd, theta, emulate)
    mask = torch.full((seq, seq), float("-inf"), dtype=torch.float64).triu(1)
    x = weight("model.embed_tokens.weight")[torch.tensor(ids)]
    for l in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = store(rms_norm(x, weight(p + "input_layernorm.weight"), eps))
        q = store(h @ weight(p + "self_attn.q_proj.weight").T).view(seq, heads, hd).transpose(0, 1)
        k = store(h @ weight(p + "self_attn.k_proj.weight").T).view(seq, kv, hd).transpose(0, 1)
        v = store(h @ weight(p + "self_attn.v_proj.weight").T).view(seq, kv, hd).transpose(0, 1)
        q, k = store(rotate(q, cos, sin)), store(rotate(k, cos, sin))
        k = k.repeat_interleave(heads // kv, dim=0)
        v = v.repeat_interleave(heads // kv, dim=0)
        scores = q @ k.transpose(1, 2) / (hd ** 0.5) + mask
        attn = store(torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(seq, hidden)
        # o_proj and down_proj add the residual in their own GEMM: no bf16 between.
        x = residual(x + attn @ weight(p + "self_attn.o_proj.weight").T)
        h = store(rms_norm(x, weight(p + "post_attention_layernorm.weight"), eps))
        gate = store(h @ weight(p + "mlp.gate_proj.weight").T)
        up = store(h @ weight(p + "mlp.up_proj.weight").T)
        act = store(torch.nn.functional.silu(gate) * up)
        x = residual(x + act @ weight(p + "mlp.down_proj.weight").T)
    h = store(rms_norm(x, weight("model.norm.weight"), eps))
    return h @ weight("lm_head.weight").T


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("prompt")
    parser.add_argument("logits")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--plain_tolerance", type=float, default=5e-2)
    args = parser.parse_args()
    with open(os.path.join(args.dir, "config.json")) as f:
        config = json.load(f)
    weights = load_safetensors(os.path.join(args.dir, "model.safetensors"))
    ids = np.fromfile(args.prompt, dtype="<i4").tolist()
    want = torch.from_numpy(np.fromfile(args.logits, dtype="<f4").astype(np.float64))
    want = want.view(len(ids), config["vocab_size"])
    emulated = (forward(config, weights, ids, True) - want).abs().max().item()
    plain = (forward(config, weights, ids, False) - want).abs().max().item()
    print("max |logit difference|: %.3g emulating the engine's storage (tolerance %g), "
          "%.3g in plain float64 (tolerance %g); logits span [%.3f, %.3f]" %
          (emulated, args.tolerance, plain, args.plain_tolerance, want.min().item(), want.max().item()))
    if not (emulated <= args.tolerance and plain <= args.plain_tolerance):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
