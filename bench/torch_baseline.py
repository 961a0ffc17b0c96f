"""PyTorch baseline for bench/gpu_step_bench.sh: what a PyTorch user gets for
the same Llama-style decoder, batch and optimizer as client/examples/gpu_job.yaml.

Eager PyTorch, fp32 parameters with bf16 autocast, fused AdamW, SDPA
attention, full logits + cross-entropy. Prints one JSON line with the median
step time and tokens/s over the timed steps, and the peak memory.

Usage: torch_baseline.py VOCAB D_MODEL LAYERS HEADS FFN SEQ BATCH [STEPS]
"""
import json
import sys
import time

import torch
import torch.nn.functional as F


class DecoderBlock(torch.nn.Module):
    def __init__(self, d_model, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attn_norm = torch.nn.RMSNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = torch.nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = torch.nn.RMSNorm(d_model)
        self.gate_up = torch.nn.Linear(d_model, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d_model, bias=False)

    def forward(self, x):
        batch, seq, width = x.shape
        qkv = self.qkv(self.attn_norm(x)).view(batch, seq, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out_proj(attn.transpose(1, 2).reshape(batch, seq, width))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(torch.nn.Module):
    def __init__(self, vocab, d_model, layers, heads, ffn):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, d_model)
        self.blocks = torch.nn.ModuleList(DecoderBlock(d_model, heads, ffn) for _ in range(layers))
        self.final_norm = torch.nn.RMSNorm(d_model)
        self.lm_head = torch.nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.final_norm(x))


def main():
    vocab, d_model, layers, heads, ffn, seq, batch = (int(a) for a in sys.argv[1:8])
    steps = int(sys.argv[8]) if len(sys.argv) > 8 else 50
    torch.manual_seed(0)
    model = Decoder(vocab, d_model, layers, heads, ffn).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01, fused=True)
    data = torch.randint(0, vocab, (steps + 10, batch, seq + 1), device="cuda")
    times = []
    for i in range(steps + 10):
        torch.cuda.synchronize()
        start = time.perf_counter()
        tokens = data[i]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 10:  # warm-up steps are not timed
            times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    print(json.dumps({"baseline": "pytorch-eager-bf16-autocast", "torch": torch.__version__,
                      "step_ms": median * 1e3, "tokens_per_s": batch * seq / median,
                      "peak_mib": torch.cuda.max_memory_allocated() / 2**20}))


if __name__ == "__main__":
    main()
