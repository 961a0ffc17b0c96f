"""Loads a Tessera export with Hugging Face transformers
(LlamaForCausalLM.from_pretrained) and compares its logits for a prompt with
the logits Tessera computed for it.

Usage: hf_transformers_check.py DIR PROMPT_FILE(int32) LOGITS_FILE(float32 [n, vocab])
           [--tolerance T]
The model runs in float32 on the CPU. Passes when the largest absolute logit
difference is at most T (default 5e-2: Tessera computes with bf16 weights and
activations). Prints the difference, the logits' range and how many
positions agree on the most likely next token.
"""
import argparse
import os

import numpy as np
import torch
import transformers


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("prompt")
    parser.add_argument("logits")
    parser.add_argument("--tolerance", type=float, default=5e-2)
    args = parser.parse_args()
    try:
        model = transformers.LlamaForCausalLM.from_pretrained(args.dir, dtype=torch.float32)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        model = transformers.LlamaForCausalLM.from_pretrained(args.dir, torch_dtype=torch.float32)
    model.eval()
    ids = np.fromfile(args.prompt, dtype="<i4").astype(np.int64)
    want = torch.from_numpy(np.fromfile(args.logits, dtype="<f4").astype(np.float64))
    want = want.view(len(ids), model.config.vocab_size)
    with torch.no_grad():
        got = model(torch.from_numpy(ids)[None, :]).logits[0].double()
    diff = (got - want).abs().max().item()
    agree = (got.argmax(-1) == want.argmax(-1)).sum().item()
    print("transformers %s, %s: max |logit difference| %.4g (tolerance %g); logits span "
          "[%.3f, %.3f]; next-token argmax agrees at %d of %d positions" %
          (transformers.__version__, os.path.basename(os.path.normpath(args.dir)), diff,
           args.tolerance, want.min().item(), want.max().item(), agree, len(ids)))
    if not diff <= args.tolerance:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
