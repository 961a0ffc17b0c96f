"""Dry run of bench/attention_bench.py's layout, file protocol and checks, without
a GPU and without PyTorch (numpy only).

The benchmark runs once on a GPU host, so what it can get wrong without a
GPU is checked here: bf16 rounding, packing q, k, v into Tessera's qkv
layout [B, T, H + 2*KV, D] and unpacking grad_qkv, the files
attention_bench.cc reads and writes, and the comparison itself, which must
pass correct outputs and catch an unwritten element (NaN), a wrong
grouped-query head map and swapped keys and values. The "binary" is a numpy
stand-in that computes head by head in Tessera's layout, or, with --binary,
the real attention_bench on the CPU reference engine (--engine=cpu). The
reference is computed separately, in PyTorch's layout with K/V expanded by
np.repeat. If torch is installed, its bf16 bit conversions are checked too.

    python3 bench/attention_selftest.py [--binary bazel-bin/bench/attention_bench] [--shape B,H,KV,T,D ...]
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np

from attention_bench import (TOLERANCES, bf16_bits_to_float, bits_to_torch, check, errors_line,
                             float_to_bf16_bits, markdown_table, pack_qkv, parse_shape, read_outputs,
                             read_raw, relative_l2, run_binary, speed_ratios, timing_record,
                             tokens_first, torch_to_bits, write_inputs)


def numpy_attention(q, k, v, dout):
    """float64 causal GQA attention and its gradients in PyTorch's layout (q [B,H,T,D],
    k, v [B,KV,T,D]), K/V expanded with np.repeat: the self-test's reference."""
    h, kv, t, d = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    group = h // kv
    ke, ve = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ ke.transpose(0, 1, 3, 2) / math.sqrt(d)
    s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    lse = (np.log(np.exp(s - m).sum(axis=-1, keepdims=True)) + m)[..., 0]
    p = np.exp(s - lse[..., None])
    out = p @ ve
    dp = dout @ ve.transpose(0, 1, 3, 2)
    ds = p * (dp - (dout * out).sum(axis=-1, keepdims=True))
    dq = ds @ ke / math.sqrt(d)
    dke = ds.transpose(0, 1, 3, 2) @ q / math.sqrt(d)
    dve = p.transpose(0, 1, 3, 2) @ dout
    b = q.shape[0]
    return {"out": out, "lse": lse, "dq": dq,
            "dk": dke.reshape(b, kv, group, t, d).sum(axis=2), "dv": dve.reshape(b, kv, group, t, d).sum(axis=2)}


def numpy_stand_in_binary(directory, kv_head_of=None):
    """Reads DIR the way attention_bench.cc does and writes its three outputs, computed
    head by head in Tessera's layout (query head h reads kv head h // (H / KV), or
    kv_head_of(h) to simulate a wrong mapping)."""
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    b_, t_, h_, kv_, d_ = meta["B"], meta["S"], meta["nh"], meta["nkv"], meta["hd"]
    kv_head_of = kv_head_of or (lambda h: h // (h_ // kv_))
    qkv = bf16_bits_to_float(read_raw(os.path.join(directory, "qkv.bf16"), "<u2", (b_, t_, h_ + 2 * kv_, d_)))
    dout = bf16_bits_to_float(read_raw(os.path.join(directory, "grad_out.bf16"), "<u2", (b_, t_, h_, d_)))
    out = np.zeros((b_, t_, h_, d_))
    lse = np.zeros((b_, h_, t_))
    grad = np.zeros((b_, t_, h_ + 2 * kv_, d_))
    causal = np.tril(np.ones((t_, t_), dtype=bool))
    for b in range(b_):
        for h in range(h_):
            g = kv_head_of(h)
            q, k, v = (qkv[b, :, i].astype(np.float64) for i in (h, h_ + g, h_ + kv_ + g))
            s = np.where(causal, q @ k.T / math.sqrt(d_), -np.inf)
            row_lse = np.log(np.exp(s - s.max(1, keepdims=True)).sum(1)) + s.max(1)
            p = np.exp(s - row_lse[:, None])
            o = p @ v
            do = dout[b, :, h].astype(np.float64)
            ds = p * (do @ v.T - (do * o).sum(1, keepdims=True))
            out[b, :, h], lse[b, h] = o, row_lse
            grad[b, :, h] = ds @ k / math.sqrt(d_)
            grad[b, :, h_ + g] += ds.T @ q / math.sqrt(d_)
            grad[b, :, h_ + kv_ + g] += p.T @ do
    float_to_bf16_bits(out).tofile(os.path.join(directory, "out.bf16"))
    lse.astype("<f4").tofile(os.path.join(directory, "lse.f32"))
    float_to_bf16_bits(grad).tofile(os.path.join(directory, "grad_qkv.bf16"))


def self_test(args):
    """Layout, file protocol and checks, without a GPU. Raises AssertionError on failure."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32) * 100
    bits = float_to_bf16_bits(x)
    assert np.array_equal(float_to_bf16_bits(bf16_bits_to_float(bits)), bits), "bf16 round trip"
    assert np.all(np.abs(bf16_bits_to_float(bits) - x) <= np.abs(x) * 2.0 ** -8), "bf16 rounding"
    assert float_to_bf16_bits(np.float32([1.0 + 2.0 ** -8]))[0] == 0x3F80, "ties to even"
    assert float_to_bf16_bits(np.float32([1.0 + 3 * 2.0 ** -8]))[0] == 0x3F82, "ties to even (odd)"
    try:
        import torch
        t = torch.randn(3, 5).to(torch.bfloat16)
        assert torch.equal(bits_to_torch(torch_to_bits(t), "cpu"), t), "torch bf16 bits round trip"
        assert np.array_equal(torch_to_bits(t), float_to_bf16_bits(t.float().numpy())), "torch vs numpy bf16"
        print("self-test: torch bf16 conversions ok", flush=True)
    except ImportError:
        print("self-test: torch not installed, skipping its conversions", flush=True)

    shapes = args.shape or [(2, 4, 2, 9, 8), (1, 4, 1, 17, 16), (2, 3, 3, 5, 6), (1, 8, 2, 33, 32)]
    work = tempfile.mkdtemp(prefix="attention_selftest_")
    log = open(os.path.join(work, "binary.log"), "a")
    try:
        for shape in shapes:
            b, h, kv, t, d = shape
            q, k, v, dout = (float_to_bf16_bits(rng.standard_normal(s).astype(np.float32))
                             for s in ((b, h, t, d), (b, kv, t, d), (b, kv, t, d), (b, h, t, d)))
            write_inputs(work, shape, pack_qkv(q, k, v), tokens_first(dout))
            if args.binary:
                run = run_binary(args.binary, work, "cpu", 0, 1, args.lib_path, log)
                assert (run["B"], run["nh"], run["nkv"], run["S"], run["hd"]) == shape, run
                assert run["repeat_bitwise_equal"] is True, run
            else:
                numpy_stand_in_binary(work)
            got = read_outputs(work, shape)
            got = {n: (bf16_bits_to_float(a) if n != "lse" else a).astype(np.float64) for n, a in got.items()}
            want = numpy_attention(*(bf16_bits_to_float(a).astype(np.float64) for a in (q, k, v, dout)))
            errors = {n: relative_l2(got[n], want[n]) for n in TOLERANCES}
            print(errors_line(shape, "cpu-engine" if args.binary else "numpy-stand-in", errors), flush=True)
            assert not check(errors), f"{shape}: {errors}"

            # The check must catch an unwritten element and a wrong head mapping.
            poisoned = dict(got, dk=got["dk"].copy())
            poisoned["dk"].flat[0] = np.nan
            assert check({n: relative_l2(poisoned[n], want[n]) for n in TOLERANCES}) == ["dk"]
            if 1 < kv < h:  # (with kv == h both maps are the identity)
                numpy_stand_in_binary(work, kv_head_of=lambda hh: hh % kv)
                bad = read_outputs(work, shape)
                bad = {n: (bf16_bits_to_float(a) if n != "lse" else a).astype(np.float64) for n, a in bad.items()}
                assert check({n: relative_l2(bad[n], want[n]) for n in TOLERANCES}), "wrong GQA map passed"
            swapped = pack_qkv(q, v, k)  # k and v exchanged must fail too
            write_inputs(work, shape, swapped, tokens_first(dout))
            numpy_stand_in_binary(work)
            bad = read_outputs(work, shape)
            bad = {n: (bf16_bits_to_float(a) if n != "lse" else a).astype(np.float64) for n, a in bad.items()}
            assert check({n: relative_l2(bad[n], want[n]) for n in TOLERANCES}), "swapped k/v passed"

        # The report, from made-up timings.
        shape = (8, 16, 16, 2048, 64)
        fake = {"shape": list(shape), "timings": {"tessera": timing_record(shape, "tessera", 0.5, 2.0),
                                                  "flash": timing_record(shape, "flash", 0.327, 1.379)},
                "sdpa_errors": {"cudnn": "No available kernel"}}
        fake["ratios"] = {"flash": speed_ratios(fake["timings"]["tessera"], fake["timings"]["flash"])}
        assert abs(fake["timings"]["flash"]["fwd_tflops"] - 210.2) < 0.2, fake  # the anchor's figure
        assert fake["ratios"]["flash"]["fwd"] == 0.654, fake
        print(markdown_table([fake]))
    finally:
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    print("self-test: ok")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", help="attention_bench, run with --engine=cpu (default: the numpy stand-in)")
    p.add_argument("--lib-path", default="", help="prepended to LD_LIBRARY_PATH for the binary only")
    p.add_argument("--shape", type=parse_shape, action="append", help="B,H,KV,T,D (repeatable)")
    return self_test(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
