"""Tessera's FP8 GEMM, FusedAdam and fused linear + cross-entropy against PyTorch, on one GPU.

For each op this script writes fresh random inputs for bench/ops_bench.cc
(`ops_bench --op=...`, which runs the op once through Tessera's Ops interface
on the CUDA engine, writes the outputs back, then times it with cudaEvents),
checks Tessera's outputs against a reference computed here from the same
inputs, and only then times the PyTorch counterpart. No speed is printed if
any check fails; the exit code is then 1.

fp8_gemm. d [M, N] bf16 = a [M, K] e4m3 . b [N, K]^T e4m3 x scale_inv_a x
scale_inv_b, the forward GEMM's layout (Ops::Gemm, trans_a false, trans_b
true). The inputs are random e4m3 codes (random sign, exponent field 3..11,
random mantissa: magnitudes 1/16 to 30) and two per-tensor scale_inv that
are not powers of two. Reference: the decoded operands multiplied in fp32
(TF32 off), times the two scales. Check: relative L2 ||d - ref|| / ||ref||
<= 2e-2, or no more than 1.25x _scaled_mm's own error on the same bytes
(bf16 rounding of d alone gives about 1e-3; both use Hopper's fast FP8
accumulation, whose error grows with K). Baseline: torch._scaled_mm on the
same bytes (b transposed as it requires, scale_a / scale_b on the device,
out_dtype bf16, use_fast_accum=True like Tessera's forward GEMMs); its
error and its distance to Tessera's d are printed. Shapes: 8192^3 and the
221M model's forward GEMMs at 16384 tokens. FLOPs 2MNK.

fused_adam. Ops::FusedAdam over parameters built as the trainer builds
them (CreateShardedParam, AsAdamShard, CreateAdamPlan): the shards rank 7
of 8 holds of a Llama-style model with deliberately odd widths (d 4100, ffn
11147, 37 layers, vocab 128258, 8.6B parameters) plus six tiny parameters:
231 shards, 1.074e9 elements, 4 empty shards and 114 whose size is not a
multiple of 4; block linears e4m3, the rest bf16. Checked first on a small
instance of the same construction (d 1028, 6 layers: 45 shards, 13.6M
elements) in the same invocation: new master, m and v against a float64
AdamW (bias correction, decoupled weight decay, grad x grad_scale) within
|got - ref| <= 1e-5 |ref| + 1e-6 max|ref| (the absolute term covers
cancellation in m); the e4m3 / bf16 bytes must equal the RNE (satfinite)
encoding of Tessera's own new master x scale, every amax must equal
max|new master| of its shard and every scale_inv 1/scale. The binary then
fills the large instance by tiling the check inputs on the device, times
FusedAdam, and times a 2 GiB device-to-device copy the same way. Bytes
moved per call: read grad (4), read + write master, m, v (24), write the
e4m3 (1) or bf16 (2) element: 29 or 30 bytes per element; GB/s is that over
the time, compared with the copy's 2 x size / time. For scale only,
torch.optim.AdamW(fused=True) on fp32 tensors of the same shard sizes (28
bytes per element, no FP8 write).

fused_ce. Ops::FusedLinearCrossEntropy at N 8192, H 4096, V 131072 (bf16
hidden [N, H] ~ N(0, 1) and weight [V, H] ~ N(0, 0.02), int32 targets, 1%
ignore_index -100, chunk_tokens 1024 like the JobSpec default; grad_weight
fp32, written by the op rather than added to, as the training step calls it).
Reference: fp32 logits from the bf16 inputs (TF32 off), chunked over tokens,
giving the summed loss, grad_hidden and grad_weight of the summed loss.
Check: mean loss within 1e-3 relative, valid-token count exact, grad_hidden
and grad_weight within 1e-2 relative L2. Baseline: full logits in PyTorch
(h @ w.T in bf16, F.cross_entropy on the fp32 logits with reduction "sum",
torch.autograd.grad for h and w), held to the same tolerances, its peak
memory above its inputs from torch.cuda.max_memory_allocated. Tessera's
extra memory is its chunk workspace: the free device memory its first call
took (cudaMemGetInfo) beside the size cuda_ops.cc gives it (chunk x V x 2
bytes: bf16 logits, the dlogits written over them). FLOPs 6NHV.

Timing everywhere: `--warmup` untimed repetitions, then `--reps`, each
between two CUDA events around `inner` calls (inner is chosen per GEMM shape
so a repetition lasts about a millisecond or more; 1 elsewhere); the median
per call is reported (the binary uses the same rule). Speed ratios are
Tessera's speed over the other's (>1: Tessera faster).

    python3 bench/ops_bench.py --binary B/bin/ops_bench \\
        --lib-path B/lib:/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64 \\
        [--ops fp8_gemm,fused_adam,fused_ce] [--json-out F.jsonl] [--table-out F.md]

Without a GPU, `--device cpu --tiny` runs the same path with tiny shapes on
the binary's CPU reference engine and CPU PyTorch (baselines that need a
GPU or torch 2.x are recorded as unavailable).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

OPS = ("fp8_gemm", "fused_adam", "fused_ce")
GEMM_SHAPES = [(8192, 8192, 8192), (16384, 3072, 1024), (16384, 1024, 1024),
               (16384, 5632, 1024), (16384, 1024, 2816)]
CE_SHAPE, CE_CHUNK = (8192, 4096, 131072), 1024
IGNORE_INDEX = -100
ADAM_WORLD, ADAM_RANK = 8, 7
ADAM_CHECK_MODEL = (1028, 2757, 6, 16387)      # d, ffn, layers, vocab
ADAM_BENCH_MODEL = (4100, 11147, 37, 128258)
ADAM_TINY_ROWS = (5, 12, 15, 20, 35, 50)       # rank 7 of 8 owns none of 5, 12, 20, 35
ADAM_HYPER = {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "step": 10}
ADAM_GRAD_SCALE = 1.0 / 8192
COPY_BYTES = 2 << 30
TINY = {"gemm": [(64, 48, 32), (32, 80, 64)], "ce": ((48, 32, 500), 20),
        "adam_check": (20, 37, 2, 101), "adam_bench": (36, 61, 2, 203), "copy_bytes": 1 << 20}
TOLERANCES = {
    "fp8_gemm": {"d_rel_l2": 2e-2, "or_times_scaled_mm": 1.25},
    "fused_adam": {"rtol": 1e-5, "atol_of_max": 1e-6, "fp8_bf16_bytes": "exact", "amax": "exact",
                   "scale_inv": "exact"},
    "fused_ce": {"loss_rel": 1e-3, "grad_hidden_rel_l2": 1e-2, "grad_weight_rel_l2": 1e-2,
                 "valid_tokens": "exact"},
}


# ---- Number formats (numpy) ---------------------------------------------------------------

def float_to_bf16_bits(x):
    """fp32 values -> bf16 bit patterns (uint16), round to nearest even."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    bits[np.isnan(x)] = 0x7FC0
    return bits


def e4m3_table():
    """The value of each of the 256 OCP e4m3 codes (0x7F and 0xFF are NaN)."""
    codes = np.arange(256)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 7
    magnitude = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6,
                         (1 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    values = np.where(codes & 0x80, -magnitude, magnitude)
    values[(codes & 0x7F) == 0x7F] = np.nan
    return values.astype(np.float32)


E4M3 = e4m3_table()
_E4M3_MAGNITUDES = E4M3[:0x7F].astype(np.float64)  # codes 0x00..0x7E, increasing


def encode_e4m3(x):
    """fp32 -> e4m3 codes: round to nearest even, saturate to +-448, NaN -> 0x7F (Tessera's rule)."""
    x = np.asarray(x, dtype=np.float32)
    a = np.minimum(np.abs(x).astype(np.float64), 448.0)
    hi = np.searchsorted(_E4M3_MAGNITUDES, a, side="left").clip(0, 0x7E)
    lo = np.maximum(hi - 1, 0)
    below, above = a - _E4M3_MAGNITUDES[lo], _E4M3_MAGNITUDES[hi] - a
    code = np.where((above < below) | ((above == below) & (hi % 2 == 0)), hi, lo).astype(np.uint8)
    code |= np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    code[np.isnan(x)] = 0x7F
    return code


def random_e4m3_codes(shape, rng):
    """Random finite e4m3 codes: random sign, exponent field 3..11, random mantissa."""
    sign = rng.integers(0, 2, size=shape, dtype=np.uint8) << 7
    exponent = rng.integers(3, 12, size=shape, dtype=np.uint8) << 3
    return sign | exponent | rng.integers(0, 8, size=shape, dtype=np.uint8)


def relative_l2(got, want):
    """||got - want|| / ||want|| (numpy or torch); NaN if either holds a NaN."""
    if isinstance(got, np.ndarray):
        diff = got.astype(np.float64) - want.astype(np.float64)
        num, den = float((diff * diff).sum()), float((want.astype(np.float64) ** 2).sum())
    else:
        import torch
        num = float((got.float() - want.float()).pow(2).sum(dtype=torch.float64))
        den = float(want.float().pow(2).sum(dtype=torch.float64))
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


# ---- FusedAdam tables and reference (numpy) -----------------------------------------------

def shard_numel(rows, cols, world, rank):
    """Elements rank owns of a [rows, cols] parameter (worker/fsdp/shard_layout.h)."""
    per_rank = -(-rows // world)
    begin, end = min(rows, rank * per_rank), min(rows, (rank + 1) * per_rank)
    return (end - begin) * cols


def adam_table(d, ffn, layers, vocab):
    """[name, rows, cols, dtype, weight_decay] rows in FsdpTrainer::AllParams order (embedding,
    per layer attn_norm, qkv, out_proj, mlp_norm, gate_up, down, then final_norm, lm_head; block
    linears e4m3, the rest bf16, norms without decay), then the tiny extra parameters."""
    t = [["embedding", vocab, d, "bf16", True]]
    for layer in range(layers):
        p = f"blocks.{layer}."
        t += [[p + "attn_norm", d, 1, "bf16", False], [p + "qkv", 3 * d, d, "e4m3", True],
              [p + "out_proj", d, d, "e4m3", True], [p + "mlp_norm", d, 1, "bf16", False],
              [p + "gate_up", 2 * ffn, d, "e4m3", True], [p + "down", d, ffn, "e4m3", True]]
    t += [["final_norm", d, 1, "bf16", False], ["lm_head", vocab, d, "bf16", True]]
    t += [[f"extra.{i}", rows, 3, "e4m3" if i % 2 == 0 else "bf16", True]
          for i, rows in enumerate(ADAM_TINY_ROWS)]
    return t


def table_numels(table):
    return [shard_numel(rows, cols, ADAM_WORLD, ADAM_RANK) for _, rows, cols, _, _ in table]


def describe_table(table):
    numels = table_numels(table)
    return {"shards": len(table), "elements": sum(numels),
            "fp8_elements": sum(n for n, row in zip(numels, table) if row[3] == "e4m3"),
            "bf16_elements": sum(n for n, row in zip(numels, table) if row[3] == "bf16"),
            "empty_shards": sum(n == 0 for n in numels),
            "shards_not_multiple_of_4": sum(n % 4 != 0 for n in numels)}


def adam_bytes(fp8_elements, bf16_elements):
    """Bytes one FusedAdam call moves: grad read (4), master, m, v read + written (24), then
    the e4m3 (1) or bf16 (2) element written."""
    return 29 * fp8_elements + 30 * bf16_elements


def adamw_reference(master, grad, m, v, decay, hyper, grad_scale):
    """float64 AdamW from fp32 inputs with the fp32-rounded hyperparameters the binary uses.
    decay: per-element 0/1. Returns new master, m, v."""
    f = lambda x: float(np.float32(x))  # noqa: E731
    lr, b1, b2, eps, wd = f(hyper["lr"]), f(hyper["beta1"]), f(hyper["beta2"]), f(hyper["eps"]), \
        f(hyper["weight_decay"])
    g = grad.astype(np.float64) * f(grad_scale)
    m1 = b1 * m.astype(np.float64) + (1.0 - b1) * g
    v1 = b2 * v.astype(np.float64) + (1.0 - b2) * g * g
    update = (m1 / (1.0 - b1 ** hyper["step"])) / (np.sqrt(v1 / (1.0 - b2 ** hyper["step"])) + eps)
    w = master.astype(np.float64)
    return w - lr * wd * w * decay - lr * update, m1, v1


def close_report(got, ref, rtol, atol_of_max):
    """Elements outside |got - ref| <= rtol |ref| + atol_of_max max|ref|, and the worst ratio."""
    atol = atol_of_max * float(np.abs(ref).max())
    err = np.abs(got.astype(np.float64) - ref)
    allowed = rtol * np.abs(ref) + atol
    bad = ~(err <= allowed)
    return int(bad.sum()), float(np.nanmax(err / allowed)) if err.size else 0.0


# ---- The binary ---------------------------------------------------------------------------

def run_binary(args, op, directory, flags, log, reps=None):
    env = dict(os.environ)
    if args.lib_path:
        env["LD_LIBRARY_PATH"] = args.lib_path + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    engine = "cuda" if args.device.startswith("cuda") else "cpu"
    cmd = [args.binary, f"--op={op}", f"--dir={directory}", f"--engine={engine}",
           f"--warmup={args.warmup}", f"--reps={args.reps if reps is None else reps}"] + flags
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    log.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    log.flush()
    if proc.returncode != 0:
        raise RuntimeError(f"ops_bench --op={op} exited {proc.returncode}:\n{proc.stderr.strip()}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(lines) != 1:
        raise RuntimeError(f"ops_bench --op={op} printed no result line:\n{proc.stdout}")
    return json.loads(lines[0])


def read_raw(path, dtype, count):
    data = np.fromfile(path, dtype=dtype)
    if data.size != count:
        raise RuntimeError(f"{path}: {data.size} elements, expected {count}")
    return data


def clear_dir(directory):
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))


# ---- torch helpers ------------------------------------------------------------------------

def time_ms(fn, args, inner=1):
    """Median per-call time of `reps` repetitions of `inner` calls after `warmup` untimed ones:
    CUDA events on a GPU, the host clock on the CPU (dry runs only)."""
    import time
    import torch
    cuda = args.device.startswith("cuda")
    for _ in range(args.warmup):
        for _ in range(inner):
            fn()
    if cuda:
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        if cuda:
            start.record()
        for _ in range(inner):
            fn()
        if cuda:
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / inner)
        else:
            times.append((time.perf_counter() - t0) * 1e3 / inner)
    times.sort()
    return times[len(times) // 2]


def torch_to_bits(t):
    import torch
    return t.detach().contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def bits_to_torch(bits, device):
    import torch
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).to(device).view(torch.bfloat16)


def free_torch_memory(args):
    import gc
    import torch
    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()


def short(ex):
    return (str(ex).strip().splitlines() or [type(ex).__name__])[0][:200]


# ---- fp8_gemm -----------------------------------------------------------------------------

def gemm_inner(shape):
    m, n, k = shape
    return max(1, min(100, math.ceil(1e12 / (2 * m * n * k))))


def run_fp8_gemm(args, work_dir, log):
    import torch
    dev = args.device
    table = torch.from_numpy(E4M3).to(dev)
    results = []
    for shape in (TINY["gemm"] if args.tiny else GEMM_SHAPES):
        m, n, k = shape
        r = {"op": "fp8_gemm", "shape": [m, n, k], "inner": gemm_inner(shape), "timings": {},
             "baseline_errors": {}}
        results.append(r)
        rng = np.random.default_rng([args.seed, m, n, k])
        a_codes, b_codes = random_e4m3_codes((m, k), rng), random_e4m3_codes((n, k), rng)
        scale_inv = np.array([0.0123, 0.0456], dtype=np.float32)
        clear_dir(work_dir)
        a_codes.tofile(os.path.join(work_dir, "a.e4m3"))
        b_codes.tofile(os.path.join(work_dir, "b.e4m3"))
        scale_inv.tofile(os.path.join(work_dir, "scale_inv.f32"))
        try:
            run = run_binary(args, "fp8_gemm", work_dir, [f"--shape={m},{n},{k}", f"--inner={r['inner']}"], log)
            d = bits_to_torch(read_raw(os.path.join(work_dir, "d.bf16"), "<u2", m * n).reshape(m, n), dev)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            r.update(ok=False, failure=short(e))
            print(f"FAIL fp8_gemm {shape}: {e}", flush=True)
            continue
        a8, b8 = torch.from_numpy(a_codes).to(dev), torch.from_numpy(b_codes).to(dev)
        sa, sb = float(scale_inv[0]), float(scale_inv[1])
        ref = (table[a8.long()] @ table[b8.long()].t()) * (sa * sb)
        r["errors"] = {"tessera": relative_l2(d, ref)}
        r["repeat_bitwise_equal"] = run.get("repeat_bitwise_equal")
        r["device"] = run.get("device")
        baseline = {}

        def scaled_mm():
            return torch._scaled_mm(baseline["a"], baseline["bt"], scale_a=baseline["sa"], scale_b=baseline["sb"],
                                    out_dtype=torch.bfloat16, use_fast_accum=True)
        try:
            # The scales live on the device, as Tessera's do; made once, outside any timing.
            baseline.update(a=a8.view(torch.float8_e4m3fn), bt=b8.view(torch.float8_e4m3fn).t(),
                            sa=torch.tensor(sa, device=dev), sb=torch.tensor(sb, device=dev))
            out = scaled_mm()
            r["errors"]["_scaled_mm"] = relative_l2(out, ref)
            r["errors"]["tessera_vs_scaled_mm"] = relative_l2(d, out)
            del out
        except (RuntimeError, AttributeError, TypeError) as ex:
            r["baseline_errors"]["_scaled_mm"] = short(ex)
        # Tessera passes within 2e-2 of the fp32 reference, or within 1.25x the error of
        # _scaled_mm, which runs the same fast-accumulation hardware path.
        tol = TOLERANCES["fp8_gemm"]
        scaled_mm_error = r["errors"].get("_scaled_mm", 0.0)
        r["tolerance"] = max(tol["d_rel_l2"], tol["or_times_scaled_mm"] * (scaled_mm_error if math.isfinite(scaled_mm_error) else 0.0))
        r["ok"] = r["errors"]["tessera"] <= r["tolerance"]
        print(f"errors fp8_gemm {shape}: " + " ".join(f"{k_}={v:.2e}" for k_, v in r["errors"].items())
              + f" (tolerance {r['tolerance']:.2e})", flush=True)
        del ref, d
        if r["ok"]:
            r["timings"]["tessera"] = run["gemm_ms"]
            if math.isfinite(r["errors"].get("_scaled_mm", math.nan)):
                r["timings"]["_scaled_mm"] = time_ms(scaled_mm, args, r["inner"])
            elif "_scaled_mm" in r["errors"]:
                r["baseline_errors"]["_scaled_mm"] = "its output holds NaN or Inf"
        del a8, b8, baseline
        free_torch_memory(args)
    return results


# ---- fused_adam ---------------------------------------------------------------------------

def adam_inputs(table, rng):
    """master ~ N(0, 0.02), grad ~ N(0, 8) (summed over tokens; x grad_scale 1/8192), m ~ N(0, 1e-3),
    v = N(0, 1e-3)^2, and per-parameter scales (448 / (2 amax), every fifth 448 / (0.9 amax) so a few
    elements saturate; 1 for empty shards)."""
    numels = table_numels(table)
    total = sum(numels)
    f32 = np.float32
    master = (rng.standard_normal(total) * 0.02).astype(f32)
    grad = (rng.standard_normal(total) * 8.0).astype(f32)
    m = (rng.standard_normal(total) * 1e-3).astype(f32)
    v = ((rng.standard_normal(total) * 1e-3) ** 2).astype(f32)
    scales, offset = [], 0
    for i, n in enumerate(numels):
        amax = float(np.abs(master[offset:offset + n]).max()) if n else 0.0
        scales.append(448.0 / (amax * (0.9 if i % 5 == 0 else 2.0)) if n else 1.0)
        offset += n
    return {"master": master, "grad": grad, "exp_avg": m, "exp_avg_sq": v}, np.array(scales, dtype=f32)


def check_adam(table, inputs, scales, work_dir, reported_numels):
    """Compares the binary's check-instance outputs with the reference. Returns (errors, failures)."""
    tol = TOLERANCES["fused_adam"]
    numels = table_numels(table)
    if reported_numels != numels:
        return {}, [f"shard sizes differ from worker/fsdp/shard_layout.h's (binary {reported_numels[:8]}...)"]
    total = sum(numels)
    got = {name: read_raw(os.path.join(work_dir, f"{name}_out.f32"), "<f4", total)
           for name in ("master", "exp_avg", "exp_avg_sq")}
    compute = np.fromfile(os.path.join(work_dir, "compute_out.bin"), dtype=np.uint8)
    amax = read_raw(os.path.join(work_dir, "amax_out.f32"), "<f4", len(table))
    scale_inv = read_raw(os.path.join(work_dir, "scale_inv_out.f32"), "<f4", len(table))
    decay = np.repeat(np.array([row[4] for row in table], dtype=np.float64), numels)
    ref = dict(zip(("master", "exp_avg", "exp_avg_sq"),
                   adamw_reference(inputs["master"], inputs["grad"], inputs["exp_avg"], inputs["exp_avg_sq"],
                                   decay, ADAM_HYPER, ADAM_GRAD_SCALE)))
    errors, failures = {}, []
    for name in ref:
        bad, worst = close_report(got[name], ref[name], tol["rtol"], tol["atol_of_max"])
        errors[name] = {"outside": bad, "worst_err_over_allowed": worst}
        if bad:
            failures.append(f"{name}: {bad} elements outside tolerance (worst {worst:.2f}x allowed)")
    expected_bytes = sum(n * (1 if row[3] == "e4m3" else 2) for n, row in zip(numels, table))
    if compute.size != expected_bytes:
        return errors, failures + [f"compute_out.bin: {compute.size} bytes, expected {expected_bytes}"]
    wrong_bytes = wrong_amax = wrong_scale_inv = 0
    offset = byte = 0
    for i, (n, row) in enumerate(zip(numels, table)):
        w = got["master"][offset:offset + n]
        if row[3] == "e4m3":
            want = encode_e4m3(w * scales[i])  # fp32 product, as the kernel computes it
            wrong_bytes += int((compute[byte:byte + n] != want).sum())
            wrong_amax += not (amax[i] == (np.abs(w).max() if n else np.float32(0)))
            wrong_scale_inv += not (scale_inv[i] == np.float32(1) / scales[i])
            byte += n
        else:
            want = float_to_bf16_bits(w)
            wrong_bytes += int((compute[byte:byte + 2 * n].view("<u2") != want).sum())
            byte += 2 * n
        offset += n
    errors.update(compute_elements_wrong=wrong_bytes, amax_wrong=wrong_amax, scale_inv_wrong=wrong_scale_inv)
    for count, what in ((wrong_bytes, "e4m3/bf16 elements differ from the encoding of the new master"),
                        (wrong_amax, "amax values differ from max|new master| of their shard"),
                        (wrong_scale_inv, "scale_inv values differ from 1 / scale")):
        if count:
            failures.append(f"{count} {what}")
    return errors, failures


def encoder_selfcheck():
    """This script's e4m3 encoder against torch's float8 cast (when torch has it): codes that differ."""
    import torch
    if not hasattr(torch, "float8_e4m3fn"):
        return None
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(1 << 16).astype(np.float32) * s for s in (1e-3, 0.1, 10, 300)]
                       + [E4M3[:0x7F], (E4M3[:0x7E] + E4M3[1:0x7F]) / 2]).astype(np.float32)  # incl. ties
    want = torch.from_numpy(x).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    return int((encode_e4m3(x) != want).sum())


def run_fused_adam(args, work_dir, log):
    import torch
    r = {"op": "fused_adam", "timings": {}, "baseline_errors": {}}
    check_table = adam_table(*(TINY["adam_check"] if args.tiny else ADAM_CHECK_MODEL))
    bench_table = adam_table(*(TINY["adam_bench"] if args.tiny else ADAM_BENCH_MODEL))
    r["check_set"], r["bench_set"] = describe_table(check_table), describe_table(bench_table)
    rng = np.random.default_rng([args.seed, 17])
    inputs, scales = adam_inputs(check_table, rng)
    clear_dir(work_dir)
    for name, data in inputs.items():
        data.astype("<f4").tofile(os.path.join(work_dir, f"{name}.f32"))
    scales.astype("<f4").tofile(os.path.join(work_dir, "scale.f32"))
    bench_scale = 448.0 / (2.0 * float(np.abs(inputs["master"]).max()))
    copy_bytes = TINY["copy_bytes"] if args.tiny else COPY_BYTES
    with open(os.path.join(work_dir, "adam.json"), "w") as f:
        json.dump(dict(world=ADAM_WORLD, rank=ADAM_RANK, grad_scale=ADAM_GRAD_SCALE, bench_scale=bench_scale,
                       copy_bytes=copy_bytes, check=check_table, bench=bench_table, **ADAM_HYPER), f)
    try:
        run = run_binary(args, "fused_adam", work_dir, [], log)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        r.update(ok=False, failure=short(e))
        print(f"FAIL fused_adam: {e}", flush=True)
        return [r]
    r["device"] = run.get("device")
    errors, failures = check_adam(check_table, inputs, scales, work_dir, run["check"]["shard_numel"])
    for key in ("shards", "fp8_elements", "bf16_elements", "empty_shards"):
        if run["bench"][key] != r["bench_set"][key]:
            failures.append(f"bench set: binary reports {key} {run['bench'][key]}, table has {r['bench_set'][key]}")
    r["errors"], r["failures"], r["ok"] = errors, failures, not failures
    r["encoder_selfcheck_mismatches"] = encoder_selfcheck()
    print(f"errors fused_adam (check set, {r['check_set']['elements']} elements): {json.dumps(errors)}", flush=True)
    if r["encoder_selfcheck_mismatches"]:
        print(f"note: this script's e4m3 encoder differs from torch's on {r['encoder_selfcheck_mismatches']} "
              "test values", flush=True)
    del inputs
    if failures:
        return [r]
    b = r["bench_set"]
    r["bytes_per_call"] = adam_bytes(b["fp8_elements"], b["bf16_elements"])
    r["copy_bytes"] = run["copy_bytes"]
    r["timings"]["tessera"] = run["adam_ms"]
    r["timings"]["copy"] = run["copy_ms"]
    try:  # torch's fused AdamW on fp32 tensors of the same shard sizes, for scale
        sizes = [n for n in table_numels(bench_table) if n > 0]
        params = [torch.empty(n, device=args.device).normal_(0, 0.02) for n in sizes]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=ADAM_HYPER["lr"], betas=(ADAM_HYPER["beta1"], ADAM_HYPER["beta2"]),
                                eps=ADAM_HYPER["eps"], weight_decay=ADAM_HYPER["weight_decay"], fused=True)
        r["timings"]["torch_adamw_fused"] = time_ms(opt.step, args)
        del params, opt
    except (RuntimeError, TypeError, ValueError) as ex:
        r["baseline_errors"]["torch_adamw_fused"] = short(ex)
    free_torch_memory(args)
    return [r]


# ---- fused_ce -----------------------------------------------------------------------------

def ce_reference(hidden, weight, targets, chunk):
    """fp32 reference from the bf16 inputs: summed loss, valid count, grad_hidden, grad_weight."""
    import torch
    wf = weight.float()
    grad_h = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device)
    grad_w = torch.zeros(wf.shape, dtype=torch.float32, device=hidden.device)
    loss, valid = 0.0, 0
    for s in range(0, hidden.shape[0], chunk):
        hc, tc = hidden[s:s + chunk].float(), targets[s:s + chunk].long()
        logits = hc @ wf.t()
        lse = torch.logsumexp(logits, dim=1)
        mask = tc != IGNORE_INDEX
        safe = torch.where(mask, tc, torch.zeros_like(tc))
        rows = torch.arange(hc.shape[0], device=hc.device)
        loss += float(((lse - logits[rows, safe]) * mask).sum(dtype=torch.float64))
        valid += int(mask.sum())
        dlogits = torch.exp(logits - lse[:, None])
        dlogits[rows, safe] -= 1.0
        dlogits *= mask[:, None]
        grad_h[s:s + chunk] = dlogits @ wf
        grad_w.addmm_(dlogits.t(), hc)
        del logits, dlogits
    return loss, valid, grad_h, grad_w


def run_fused_ce(args, work_dir, log):
    import torch
    import torch.nn.functional as F
    (n, h, v), chunk = TINY["ce"] if args.tiny else (CE_SHAPE, args.ce_chunk_tokens)
    dev, cuda = args.device, args.device.startswith("cuda")
    r = {"op": "fused_ce", "shape": [n, h, v], "chunk_tokens": chunk, "timings": {}, "baseline_errors": {},
         "memory_bytes": {}}
    gen = torch.Generator(device=dev).manual_seed(args.seed * 7919 + 3)
    hidden = torch.randn(n, h, generator=gen, device=dev).to(torch.bfloat16)
    weight = (torch.randn(v, h, generator=gen, device=dev) * 0.02).to(torch.bfloat16)
    targets = torch.randint(0, v, (n,), generator=gen, device=dev, dtype=torch.int32)
    ignored = torch.randperm(n, generator=gen, device=dev)[:max(1, n // 100)]
    targets[ignored] = IGNORE_INDEX
    clear_dir(work_dir)
    torch_to_bits(hidden).tofile(os.path.join(work_dir, "hidden.bf16"))
    torch_to_bits(weight).tofile(os.path.join(work_dir, "weight.bf16"))
    targets.cpu().numpy().astype("<i4").tofile(os.path.join(work_dir, "targets.i32"))
    try:
        run = run_binary(args, "fused_ce", work_dir, [f"--shape={n},{h},{v}", f"--chunk_tokens={chunk}",
                                                      f"--ce_accumulate={str(args.ce_accumulate).lower()}"], log)
        grad_h = bits_to_torch(read_raw(os.path.join(work_dir, "grad_hidden.bf16"), "<u2", n * h).reshape(n, h), dev)
        grad_w = torch.from_numpy(read_raw(os.path.join(work_dir, "grad_weight.f32"), "<f4", v * h).reshape(v, h)).to(dev)
        loss_sum, valid = (float(x) for x in read_raw(os.path.join(work_dir, "loss.f32"), "<f4", 2))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        r.update(ok=False, failure=short(e))
        print(f"FAIL fused_ce: {e}", flush=True)
        return [r]
    clear_dir(work_dir)
    r["device"] = run.get("device")
    r["repeat_bitwise_equal"] = run.get("repeat_bitwise_equal")
    ref_loss, ref_valid, ref_gh, ref_gw = ce_reference(hidden, weight, targets, 1024)
    tol = TOLERANCES["fused_ce"]

    def errors_of(loss, count, gh, gw):
        return {"loss_rel": abs(loss / max(count, 1) - ref_loss / ref_valid) / abs(ref_loss / ref_valid),
                "valid_tokens": int(count) if float(count).is_integer() else count, "grad_hidden_rel_l2": relative_l2(gh, ref_gh),
                "grad_weight_rel_l2": relative_l2(gw, ref_gw)}

    def failed(e):
        return [k for k in ("loss_rel", "grad_hidden_rel_l2", "grad_weight_rel_l2") if not e[k] <= tol[k]] + \
            (["valid_tokens"] if e["valid_tokens"] != ref_valid else [])

    r["errors"] = {"tessera": errors_of(loss_sum, valid, grad_h, grad_w)}
    r["reference_valid_tokens"] = ref_valid
    del grad_h, grad_w
    hg, wg = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    targets_long = targets.long()

    def torch_full_logits():
        loss = F.cross_entropy((hg @ wg.t()).float(), targets_long, ignore_index=IGNORE_INDEX, reduction="sum")
        return (loss,) + torch.autograd.grad(loss, (hg, wg))

    try:
        free_torch_memory(args)
        base = torch.cuda.memory_allocated() if cuda else 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        loss_t, gh_t, gw_t = torch_full_logits()
        if cuda:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
            r["memory_bytes"]["torch_full_logits_peak"] = peak
            r["memory_bytes"]["torch_full_logits_beyond_grads"] = peak - (gh_t.numel() + gw_t.numel()) * 2
        r["errors"]["torch_full_logits"] = errors_of(float(loss_t), ref_valid, gh_t, gw_t)
        bad = failed(r["errors"]["torch_full_logits"])
        if bad:
            r["baseline_errors"]["torch_full_logits"] = f"outputs disagree with the reference ({', '.join(bad)})"
        del loss_t, gh_t, gw_t
    except (RuntimeError, TypeError) as ex:
        r["baseline_errors"]["torch_full_logits"] = short(ex)
    del ref_gh, ref_gw
    for kernel, e in r["errors"].items():
        print(f"errors fused_ce {kernel}: " + " ".join(f"{k}={x:.2e}" if isinstance(x, float) else f"{k}={x}"
                                                      for k, x in e.items()), flush=True)
    bad = failed(r["errors"]["tessera"])
    r["ok"] = not bad
    if bad:
        r["failures"] = bad
        return [r]
    r["timings"]["tessera"] = run["fused_ce_ms"]
    r["chunk_gemm_ms"] = run.get("chunk_gemm_ms", {})
    r["memory_bytes"]["tessera_workspace_sized"] = run["workspace_bytes_sized"]
    if "workspace_bytes_measured" in run:
        r["memory_bytes"]["tessera_workspace_measured"] = run["workspace_bytes_measured"]
    if "torch_full_logits" not in r["baseline_errors"]:
        r["timings"]["torch_full_logits"] = time_ms(torch_full_logits, args)
    del hidden, weight, hg, wg
    free_torch_memory(args)
    return [r]


# ---- Report -------------------------------------------------------------------------------

def timing_lines(r):
    """One JSON-able record per timed kernel of a result."""
    t, lines = r.get("timings", {}), []
    if r["op"] == "fp8_gemm":
        m, n, k = r["shape"]
        for kernel, ms in t.items():
            line = {"op": "fp8_gemm", "shape": r["shape"], "kernel": kernel, "ms": round(ms, 4),
                    "tflops": round(2 * m * n * k / ms / 1e9, 1), "inner": r["inner"]}
            if kernel != "tessera" and "tessera" in t:
                line["tessera_speed_over_this"] = round(ms / t["tessera"], 3)
            lines.append(line)
    elif r["op"] == "fused_adam":
        copy_gbs = 2 * r["copy_bytes"] / (t["copy"] * 1e-3) / 1e9
        lines.append({"op": "fused_adam", "kernel": "copy", "ms": round(t["copy"], 4), "bytes": 2 * r["copy_bytes"],
                      "gb_per_s": round(copy_gbs, 1)})
        for kernel in ("tessera", "torch_adamw_fused"):
            if kernel not in t:
                continue
            elements = r["bench_set"]["elements"]
            moved = r["bytes_per_call"] if kernel == "tessera" else 28 * elements
            gbs = moved / (t[kernel] * 1e-3) / 1e9
            line = {"op": "fused_adam", "kernel": kernel, "ms": round(t[kernel], 4), "elements": elements,
                    "shards": r["bench_set"]["shards"], "bytes": moved, "gb_per_s": round(gbs, 1),
                    "fraction_of_copy": round(gbs / copy_gbs, 3)}
            if kernel != "tessera" and "tessera" in t:
                line["tessera_speed_over_this"] = round(t[kernel] / t["tessera"], 3)
            lines.append(line)
    elif r["op"] == "fused_ce":
        n, h, v = r["shape"]
        mem = r["memory_bytes"]
        for kernel, ms in t.items():
            line = {"op": "fused_ce", "shape": r["shape"], "kernel": kernel, "ms": round(ms, 4),
                    "tflops": round(6 * n * h * v / ms / 1e9, 1)}
            if kernel == "tessera":
                line["extra_bytes"] = mem.get("tessera_workspace_measured", mem.get("tessera_workspace_sized"))
                line["workspace_bytes_sized"] = mem.get("tessera_workspace_sized")
            else:
                line["extra_bytes"] = mem.get("torch_full_logits_peak")
                line["extra_bytes_beyond_grads"] = mem.get("torch_full_logits_beyond_grads")
                line["tessera_speed_over_this"] = round(ms / t["tessera"], 3)
            lines.append(line)
    return lines


def mib(x):
    return "-" if x is None else f"{x / 2 ** 20:,.0f}"


def markdown_tables(results):
    out = []
    gemm = [r for r in results if r["op"] == "fp8_gemm"]
    if gemm:
        out += ["| FP8 GEMM M,N,K | kernel | ms | TFLOP/s | Tessera / _scaled_mm (speed) |",
                "| --- | --- | ---: | ---: | ---: |"]
        for r in gemm:
            for line in timing_lines(r):
                ratio = f"{line['tessera_speed_over_this']:.2f}x" if "tessera_speed_over_this" in line else "-"
                out.append(f"| {','.join(map(str, r['shape']))} | {line['kernel']} | {line['ms']:.4f} | "
                           f"{line['tflops']:.1f} | {ratio} |")
            for kernel, why in r.get("baseline_errors", {}).items():
                out.append(f"| {','.join(map(str, r['shape']))} | {kernel} | - | - | {why[:60]} |")
        out.append("")
    for r in (r for r in results if r["op"] == "fused_adam"):
        b = r["bench_set"]
        out += [f"FusedAdam: {b['elements']:,} elements in {b['shards']} shards ({b['empty_shards']} empty, "
                f"{b['shards_not_multiple_of_4']} not a multiple of 4), {b['fp8_elements']:,} e4m3 + "
                f"{b['bf16_elements']:,} bf16", "",
                "| kernel | ms | bytes moved | GB/s | fraction of copy bandwidth | Tessera speed / this |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for line in timing_lines(r):
            ratio = f"{line['tessera_speed_over_this']:.2f}x" if "tessera_speed_over_this" in line else "-"
            frac = f"{line['fraction_of_copy']:.2f}" if "fraction_of_copy" in line else "1 (reference)"
            out.append(f"| {line['kernel']} | {line['ms']:.3f} | {line['bytes']:,} | {line['gb_per_s']:.0f} | "
                       f"{frac} | {ratio} |")
        for kernel, why in r.get("baseline_errors", {}).items():
            out.append(f"| {kernel} | - | - | - | - | {why[:60]} |")
        out.append("")
    for r in (r for r in results if r["op"] == "fused_ce"):
        out += [f"Fused linear + cross-entropy N,H,V = {','.join(map(str, r['shape']))}, "
                f"chunk {r['chunk_tokens']}", "",
                "| kernel | ms | TFLOP/s | extra device memory MiB | Tessera speed / this |",
                "| --- | ---: | ---: | ---: | ---: |"]
        for line in timing_lines(r):
            ratio = f"{line['tessera_speed_over_this']:.2f}x" if "tessera_speed_over_this" in line else "-"
            if line["kernel"] == "tessera":
                memory = f"{mib(line['extra_bytes'])} (sized {mib(line['workspace_bytes_sized'])})"
            else:
                memory = f"{mib(line['extra_bytes'])} ({mib(line['extra_bytes_beyond_grads'])} beyond its grads)"
            out.append(f"| {line['kernel']} | {line['ms']:.3f} | {line['tflops']:.1f} | {memory} | {ratio} |")
        for kernel, why in r.get("baseline_errors", {}).items():
            out.append(f"| {kernel} | - | - | - | {why[:60]} |")
        phases = r.get("chunk_gemm_ms")
        if phases and "tessera" in r.get("timings", {}):
            chunks = -(-r["shape"][0] // r["chunk_tokens"])
            per_chunk = r["timings"]["tessera"] / chunks
            gemms = sum(phases.values())
            out += ["", f"Per chunk ({chunks} chunks): {per_chunk:.3f} ms = " +
                    " + ".join(f"{name} GEMM {phases[name]:.3f}" for name in ("logits", "grad_x", "grad_weight")
                               if name in phases) +
                    f" + rest (row kernel) {per_chunk - gemms:.3f}"]
        out.append("")
    return "\n".join(out).rstrip()


def main_with_torch(args, ops):
    import torch
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("ops_bench.py: no CUDA device", file=sys.stderr)
        return 1
    try:  # the fp32 references must be true fp32, not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
    except Exception as e:  # noqa: BLE001 - a newer API may refuse the old switch; report it
        print(f"note: could not set allow_tf32=False: {e}", flush=True)
    runners = {"fp8_gemm": run_fp8_gemm, "fused_adam": run_fused_adam, "fused_ce": run_fused_ce}
    work_dir = tempfile.mkdtemp(prefix="ops_bench_", dir=args.work_dir)
    log_path = args.log or work_dir + ".log"  # beside the work dir, which is removed at the end
    header = {"op": "env", "gpu": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
              "warmup": args.warmup, "reps": args.reps, "binary_log": log_path,
              "tolerances": {op: TOLERANCES[op] for op in ops}}
    print(json.dumps(header), flush=True)
    results = []
    try:
        with open(log_path, "a") as log:
            for op in ops:
                results += runners[op](args, work_dir, log)
                free_torch_memory(args)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    ok = all(r.get("ok") for r in results)
    if not ok:  # no speeds at all when any output is wrong
        for r in results:
            r.pop("timings", None)
    records = [header] + [dict(r, kind="check") for r in results]
    if ok:
        records += [dict(line, kind="timing") for r in results for line in timing_lines(r)]
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.writelines(json.dumps(rec) + "\n" for rec in records)
    if not ok:
        print("\nops_bench.py: Tessera's outputs disagree with the reference; no speed is reported.",
              file=sys.stderr)
        for r in results:
            if not r.get("ok"):
                what = r.get("failure") or r.get("failures") or r.get("errors", {}).get("tessera")
                print(f"  FAIL {r['op']} {r.get('shape', '')}: {what}", file=sys.stderr)
        return 1
    for r in results:
        if r.get("repeat_bitwise_equal") is False:
            print(f"WARNING {r['op']} {r.get('shape', '')}: a repeated Tessera run gave different bits", flush=True)
    for rec in records[1:]:
        if rec["kind"] == "timing":
            print(json.dumps(rec), flush=True)
    table = markdown_tables(results)
    if args.table_out:
        with open(args.table_out, "w") as f:
            f.write(table + "\n")
    print()
    print(table)
    return 0


def parse_ops(values):
    ops = [op for v in values for op in v.split(",") if op]
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise argparse.ArgumentTypeError(f"--ops: choose from {', '.join(OPS)} (got {', '.join(unknown) or 'none'})")
    return list(dict.fromkeys(ops))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True, help="path to ops_bench (bazel-bin/bench/ops_bench or BUNDLE/bin/)")
    p.add_argument("--lib-path", default="", help="prepended to LD_LIBRARY_PATH for the binary only")
    p.add_argument("--ops", nargs="+", default=[",".join(OPS)],
                   help="which ops, comma- or space-separated (default: all three)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json-out", help="write JSON lines here: env, one check record per op/shape, timings")
    p.add_argument("--table-out", help="also write the Markdown tables here")
    p.add_argument("--log", help="append the binary's output here (default: beside the work dir)")
    p.add_argument("--work-dir", default=None, help="where the input/output files go (default: system temp)")
    p.add_argument("--ce-chunk-tokens", type=int, default=CE_CHUNK,
                   help="fused_ce: tokens per logits chunk (default: the JobSpec default, 1024)")
    p.add_argument("--ce-accumulate", action="store_true",
                   help="fused_ce: time the op adding to grad_weight (gradient accumulation) "
                        "instead of writing it, as the training step does")
    p.add_argument("--device", default="cuda", help="cuda (the benchmark), or cpu for a dry run (with --tiny)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, for a dry run of the path without a GPU")
    args = p.parse_args()
    if args.warmup < 0 or args.reps < 1:
        p.error("--warmup >= 0 and --reps >= 1")
    if args.ce_chunk_tokens < 1:
        p.error("--ce-chunk-tokens must be >= 1")
    try:
        ops = parse_ops(args.ops)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    return main_with_torch(args, ops)


if __name__ == "__main__":
    sys.exit(main())
