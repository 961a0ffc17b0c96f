"""Reads a Tessera Hugging Face export with nothing but json and numpy, as
any safetensors reader would, and checks it against the model it names.

Checks: the 8-byte header length and a JSON header that fits the file; every
tensor's dtype (BF16 or F32, as asked) and shape; data offsets that tile the
data exactly, in order, with no gap or overlap; the exact set of Llama tensor
names for the config's layer count; finite values; and config.json's model
fields.

Usage: hf_export_check.py DIR DTYPE(BF16|F32) VOCAB HIDDEN FFN LAYERS HEADS KV_HEADS
Prints one line and exits 0 when every check holds.
"""
import json
import os
import struct
import sys

import numpy as np


def main():
    out, dtype = sys.argv[1], sys.argv[2]
    vocab, hidden, ffn, layers, heads, kv = (int(x) for x in sys.argv[3:9])
    head_dim = hidden // heads
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data) and n % 8 == 0, (n, len(data))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    assert header.pop("__metadata__") == {"format": "pt"}
    body = data[8 + n:]

    want = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden],
            "lm_head.weight": [vocab, hidden]}
    for l in range(layers):
        p = "model.layers.%d." % l
        want[p + "input_layernorm.weight"] = [hidden]
        want[p + "post_attention_layernorm.weight"] = [hidden]
        want[p + "self_attn.q_proj.weight"] = [heads * head_dim, hidden]
        want[p + "self_attn.k_proj.weight"] = [kv * head_dim, hidden]
        want[p + "self_attn.v_proj.weight"] = [kv * head_dim, hidden]
        want[p + "self_attn.o_proj.weight"] = [hidden, hidden]
        want[p + "mlp.gate_proj.weight"] = [ffn, hidden]
        want[p + "mlp.up_proj.weight"] = [ffn, hidden]
        want[p + "mlp.down_proj.weight"] = [hidden, ffn]
    assert set(header) == set(want), sorted(set(header) ^ set(want))

    size = {"BF16": 2, "F32": 4}[dtype]
    end = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        assert t["dtype"] == dtype, (name, t["dtype"])
        assert t["shape"] == want[name], (name, t["shape"], want[name])
        begin, stop = t["data_offsets"]
        assert begin == end, (name, begin, end)
        assert stop - begin == int(np.prod(t["shape"])) * size, name
        raw = np.frombuffer(body[begin:stop], dtype="<u2" if dtype == "BF16" else "<f4")
        values = (raw.astype(np.uint32) << 16).view(np.float32) if dtype == "BF16" else raw
        assert np.isfinite(values).all(), name
        end = stop
    assert end == len(body), (end, len(body))

    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    for key, value in (("vocab_size", vocab), ("hidden_size", hidden), ("intermediate_size", ffn),
                       ("num_hidden_layers", layers), ("num_attention_heads", heads),
                       ("num_key_value_heads", kv)):
        assert config[key] == value, (key, config[key], value)
    assert config["rms_norm_eps"] > 0 and config["rope_theta"] > 0
    assert config["torch_dtype"] == {"BF16": "bfloat16", "F32": "float32"}[dtype]
    print("hf export: %d tensors, %d bytes of %s data, names and offsets check" %
          (len(header), len(body), dtype))


if __name__ == "__main__":
    main()
