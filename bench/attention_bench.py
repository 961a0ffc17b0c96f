"""Tessera's causal grouped-query attention against PyTorch SDPA, on one GPU.

For each shape (B, H query heads, KV key/value heads, T tokens, D head dim)
this script generates fresh random bf16 q, k, v and dO on the GPU, packs q, k
and v into Tessera's qkv layout [B, T, H + 2*KV, D] (per token: H query
heads, then KV key heads, then KV value heads), writes them for
bench/attention_bench.cc (`attention_bench`, which runs
Ops::AttentionForward + AttentionBackward on the CUDA engine once, writes
out, lse and grad_qkv back, then times forward and forward + backward), and
checks Tessera's outputs before any speed is shown.

Correctness. The reference is computed in fp32 from the same bf16 inputs:
torch.nn.functional.scaled_dot_product_attention with the MATH backend on
fp32 copies (causal, scale 1/sqrt(D), enable_gqa when H != KV) for out and
dq, dk, dv (torch.autograd.grad with the same dO), and an fp32 logsumexp of
the masked, scaled scores for lse. The check is the relative L2 error
||tessera - ref|| / ||ref|| over each whole tensor, against
    out 1e-2, lse 1e-4, dq / dk / dv 2e-2
(bf16 rounding of the outputs alone gives about 3e-3). SDPA's own bf16
flash and cuDNN results are compared with the same reference and printed
beside Tessera's errors, for scale. A NaN anywhere (the binary poisons its
outputs before the run, so an unwritten element is NaN) fails the check. If
any shape fails, the errors are printed, no speed is printed, and the exit
code is 1.

Speed. SDPA's FLASH_ATTENTION and CUDNN_ATTENTION backends
(torch.nn.attention.sdpa_kernel) on the same bf16 tensors, GQA passed as
enable_gqa=(H != KV) as in /work/shared/anchors/torch_attention_and_1b.py.
Each series runs `--warmup` untimed repetitions, then `--reps` repetitions,
each between two CUDA events; the median is reported (the binary uses the
same rule). Forward + backward is one forward and torch.autograd.grad of
q, k, v with dO (no .grad accumulation). FLOPs: causal forward
4*B*H*T*T*D/2, backward 2.5x forward (forward + backward 3.5x). The ratio
columns are Tessera's speed over the other kernel's (>1: Tessera faster).
Prints one JSON line per shape and kernel, writes all results to
--json-out (and the table to --table-out), and prints a Markdown table last.

    python3 bench/attention_bench.py --binary BUNDLE/bin/attention_bench \
        --lib-path BUNDLE/lib:/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64 \
        [--shape 8,16,16,2048,64 ...] [--json-out FILE]

Without a GPU, bench/attention_selftest.py checks the layout, the file
protocol and the checks with numpy, and `bench/cpu_dryrun.py
bench/attention_bench.py --device cpu ...` runs this whole path on the CPU
(the binary with --engine=cpu, CPU PyTorch).
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

DEFAULT_SHAPES = [(8, 16, 16, 2048, 64), (4, 16, 16, 4096, 128), (1, 32, 8, 8192, 128)]
TOLERANCES = {"out": 1e-2, "lse": 1e-4, "dq": 2e-2, "dk": 2e-2, "dv": 2e-2}
SDPA_BACKENDS = ("flash", "cudnn")


# ---- Layout and files (numpy only) -------------------------------------------------------

def float_to_bf16_bits(x):
    """fp32 values -> bf16 bit patterns (uint16), round to nearest even."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    bits[np.isnan(x)] = 0x7FC0
    return bits


def bf16_bits_to_float(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def pack_qkv(q, k, v):
    """q [B, H, T, D], k and v [B, KV, T, D] -> qkv [B, T, H + 2*KV, D] (any dtype)."""
    return np.ascontiguousarray(np.concatenate([q, k, v], axis=1).transpose(0, 2, 1, 3))


def unpack_qkv(qkv, heads, kv_heads):
    """qkv [B, T, H + 2*KV, D] -> q [B, H, T, D], k, v [B, KV, T, D] (contiguous copies)."""
    assert qkv.shape[2] == heads + 2 * kv_heads, qkv.shape
    heads_first = qkv.transpose(0, 2, 1, 3)
    return (np.ascontiguousarray(heads_first[:, :heads]),
            np.ascontiguousarray(heads_first[:, heads:heads + kv_heads]),
            np.ascontiguousarray(heads_first[:, heads + kv_heads:]))


def tokens_first(x):
    """[B, H, T, D] -> [B, T, H, D]; the same swap turns [B, T, H, D] back."""
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))


def write_inputs(directory, shape, qkv_bits, grad_out_bits):
    """Writes meta.json, qkv.bf16 and grad_out.bf16 as attention_bench.cc reads them."""
    b, h, kv, t, d = shape
    assert qkv_bits.dtype == np.uint16 and qkv_bits.shape == (b, t, h + 2 * kv, d), qkv_bits.shape
    assert grad_out_bits.dtype == np.uint16 and grad_out_bits.shape == (b, t, h, d), grad_out_bits.shape
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump({"B": b, "S": t, "nh": h, "nkv": kv, "hd": d}, f)
    qkv_bits.astype("<u2").tofile(os.path.join(directory, "qkv.bf16"))
    grad_out_bits.astype("<u2").tofile(os.path.join(directory, "grad_out.bf16"))
    for name in ("out.bf16", "lse.f32", "grad_qkv.bf16"):  # a stale output must not pass
        path = os.path.join(directory, name)
        if os.path.exists(path):
            os.remove(path)


def read_raw(path, dtype, shape):
    data = np.fromfile(path, dtype=dtype)
    if data.size != math.prod(shape):
        raise RuntimeError(f"{path}: {data.size} elements, expected {math.prod(shape)} for {shape}")
    return data.reshape(shape)


def read_outputs(directory, shape):
    """Tessera's outputs in PyTorch's layout: bf16 bits of out [B, H, T, D], fp32 lse
    [B, H, T], and bf16 bits of dq [B, H, T, D], dk and dv [B, KV, T, D]."""
    b, h, kv, t, d = shape
    out = read_raw(os.path.join(directory, "out.bf16"), "<u2", (b, t, h, d))
    lse = read_raw(os.path.join(directory, "lse.f32"), "<f4", (b, h, t))
    grad_qkv = read_raw(os.path.join(directory, "grad_qkv.bf16"), "<u2", (b, t, h + 2 * kv, d))
    dq, dk, dv = unpack_qkv(grad_qkv, h, kv)
    return {"out": tokens_first(out), "lse": lse, "dq": dq, "dk": dk, "dv": dv}


# ---- Checks (numpy arrays or torch tensors) ----------------------------------------------

def relative_l2(got, want):
    """||got - want|| / ||want||; NaN if either holds a NaN (then every check fails)."""
    diff = got - want
    num = float((diff * diff).sum())
    den = float((want * want).sum())
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def check(errors):
    """Names whose error is above tolerance (or NaN)."""
    return [name for name, tol in TOLERANCES.items() if not errors[name] <= tol]


# ---- FLOPs and the report ----------------------------------------------------------------

def attention_flops(shape):
    b, h, _, t, d = shape
    fwd = 4 * b * h * t * t * d / 2  # causal: half the score matrix
    return fwd, 3.5 * fwd            # backward is 2.5x forward


def timing_record(shape, kernel, fwd_ms, fwdbwd_ms):
    fwd_flops, fwdbwd_flops = attention_flops(shape)
    return {"shape": list(shape), "kernel": kernel,
            "fwd_ms": round(fwd_ms, 4), "fwd_tflops": round(fwd_flops / fwd_ms / 1e9, 1),
            "fwdbwd_ms": round(fwdbwd_ms, 4), "fwdbwd_tflops": round(fwdbwd_flops / fwdbwd_ms / 1e9, 1)}


def document_record(shape, run):
    """The binary's --documents result, with the FLOP rates: a sequence of N
    equal documents has 1/N of the causal FLOPs, so the masked run's rate is
    counted on those, and set against the whole-sequence run of the same call."""
    doc = dict(run["documents"])
    n = doc["documents"]
    _, dense_fwdbwd = attention_flops(shape)
    doc["shape"] = list(shape)
    errors = doc["rel_l2_vs_separate"]
    doc["agrees"] = (errors["out"] <= TOLERANCES["out"] and errors["lse"] <= TOLERANCES["lse"]
                     and errors["grad_qkv"] <= TOLERANCES["dq"])
    if "fwdbwd_ms" in doc:
        masked_flops = dense_fwdbwd / n
        doc["fwdbwd_tflops"] = round(masked_flops / doc["fwdbwd_ms"] / 1e9, 1)
        doc["separate_fwdbwd_tflops"] = round(masked_flops / doc["separate_fwdbwd_ms"] / 1e9, 1)
        doc["whole_sequence_fwdbwd_tflops"] = round(dense_fwdbwd / run["fwdbwd_ms"] / 1e9, 1)
        doc["rate_over_whole_sequence"] = round(doc["fwdbwd_tflops"] / doc["whole_sequence_fwdbwd_tflops"], 3)
    return doc


def speed_ratios(tessera, other):
    """Tessera's speed over `other`'s (time ratio other/Tessera): >1 means Tessera is faster."""
    return {"fwd": round(other["fwd_ms"] / tessera["fwd_ms"], 3),
            "fwdbwd": round(other["fwdbwd_ms"] / tessera["fwdbwd_ms"], 3)}


def markdown_table(results):
    lines = ["| B,H,KV,T,D | kernel | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s "
             "| Tessera speed / this (fwd, fwd+bwd) |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        shape = ",".join(str(x) for x in r["shape"])
        tessera = r["timings"].get("tessera")
        for kernel in ("tessera",) + SDPA_BACKENDS:
            t = r["timings"].get(kernel)
            if t is None:
                why = r.get("sdpa_errors", {}).get(kernel, "not run")
                lines.append(f"| {shape} | {kernel} | - | - | - | - | {why[:60]} |")
                continue
            ratio = "-"
            if kernel != "tessera" and tessera is not None:
                s = speed_ratios(tessera, t)
                ratio = f"{s['fwd']:.2f}x, {s['fwdbwd']:.2f}x"
            lines.append(f"| {shape} | {kernel} | {t['fwd_ms']:.3f} | {t['fwd_tflops']:.1f} | "
                         f"{t['fwdbwd_ms']:.3f} | {t['fwdbwd_tflops']:.1f} | {ratio} |")
    return "\n".join(lines)


def errors_line(shape, kernel, errors):
    parts = " ".join(f"{k}={errors[k]:.2e}" for k in TOLERANCES if k in errors)
    return f"errors {shape} {kernel}: {parts}"


# ---- The binary --------------------------------------------------------------------------

def run_binary(binary, directory, engine, warmup, reps, lib_path, log, documents=0):
    env = dict(os.environ)
    if lib_path:
        env["LD_LIBRARY_PATH"] = lib_path + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    cmd = [binary, f"--dir={directory}", f"--engine={engine}", f"--warmup={warmup}", f"--reps={reps}",
           f"--documents={documents}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    log.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    log.flush()
    if proc.returncode != 0:
        raise RuntimeError(f"attention_bench exited {proc.returncode}:\n{proc.stderr.strip()}")
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        raise RuntimeError(f"attention_bench printed no result line:\n{proc.stdout}")
    return json.loads(lines[0])


# ---- GPU path (torch) --------------------------------------------------------------------

def torch_to_bits(t):
    """bf16 tensor -> numpy uint16 bit patterns, same shape."""
    import torch
    return t.detach().contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def bits_to_torch(bits, device):
    """numpy uint16 bf16 bit patterns -> bf16 tensor on `device`."""
    import torch
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).to(device).view(torch.bfloat16)


def reference_fp32(q, k, v, dout, chunk_bytes=1 << 30):
    """fp32 reference from bf16 q [B,H,T,D], k, v [B,KV,T,D], dout [B,H,T,D]: SDPA (MATH
    backend, fp32) for out and the gradients, an fp32 logsumexp for lse. Runs per batch
    element and group of KV heads so no fp32 T x T block exceeds about chunk_bytes."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b_, h_, t_, d_ = q.shape
    kv_ = k.shape[1]
    group = h_ // kv_
    dev = q.device
    f32 = dict(device=dev, dtype=torch.float32)
    ref = {"out": torch.empty(b_, h_, t_, d_, **f32), "lse": torch.empty(b_, h_, t_, **f32),
           "dq": torch.empty(b_, h_, t_, d_, **f32), "dk": torch.empty(b_, kv_, t_, d_, **f32),
           "dv": torch.empty(b_, kv_, t_, d_, **f32)}
    kv_per_chunk = max(1, min(kv_, chunk_bytes // (group * t_ * t_ * 4)))
    future = torch.ones(t_, t_, dtype=torch.bool, device=dev).triu_(1)
    scale = 1.0 / math.sqrt(d_)
    for b in range(b_):
        for g0 in range(0, kv_, kv_per_chunk):
            g1 = min(kv_, g0 + kv_per_chunk)
            h0, h1 = g0 * group, g1 * group
            qc = q[b:b + 1, h0:h1].float().requires_grad_()
            kc = k[b:b + 1, g0:g1].float().requires_grad_()
            vc = v[b:b + 1, g0:g1].float().requires_grad_()
            with sdpa_kernel(SDPBackend.MATH):
                o = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True, enable_gqa=group > 1)
            dq, dk, dv = torch.autograd.grad(o, (qc, kc, vc), dout[b:b + 1, h0:h1].float())
            with torch.no_grad():
                scores = torch.matmul(qc, kc.repeat_interleave(group, dim=1).transpose(-1, -2)) * scale
                scores.masked_fill_(future, float("-inf"))
                ref["lse"][b:b + 1, h0:h1] = torch.logsumexp(scores, dim=-1)
                del scores
            ref["out"][b:b + 1, h0:h1] = o.detach()
            ref["dq"][b:b + 1, h0:h1] = dq
            ref["dk"][b:b + 1, g0:g1] = dk
            ref["dv"][b:b + 1, g0:g1] = dv
            del o, dq, dk, dv, qc, kc, vc
    return ref


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name]


def time_ms(fn, warmup, reps, device):
    """Median of `reps` timings of fn after `warmup` untimed calls: CUDA events on a GPU,
    the host clock on the CPU (dry runs only)."""
    import time
    import torch
    for _ in range(warmup):
        fn()
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        if cuda:
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def run_shape_on_gpu(shape, args, work_dir, log):
    """Checks Tessera at one shape, then (if correct) times SDPA. Returns the result dict."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    b, h, kv, t, d = shape
    dev = args.device
    gen = torch.Generator(device=dev).manual_seed(args.seed * 7919 + sum(x * 31 ** i for i, x in enumerate(shape)))
    bf16 = dict(device=dev, dtype=torch.bfloat16)
    q = torch.randn(b, h, t, d, generator=gen, **bf16)
    k = torch.randn(b, kv, t, d, generator=gen, **bf16)
    v = torch.randn(b, kv, t, d, generator=gen, **bf16)
    dout = torch.randn(b, h, t, d, generator=gen, **bf16)
    result = {"shape": list(shape), "tolerances": TOLERANCES, "timings": {}, "sdpa_errors": {}}

    write_inputs(work_dir, shape,
                 pack_qkv(torch_to_bits(q), torch_to_bits(k), torch_to_bits(v)),
                 tokens_first(torch_to_bits(dout)))
    try:
        engine = "cuda" if dev.startswith("cuda") else "cpu"
        tessera_run = run_binary(args.binary, work_dir, engine, args.warmup, args.reps, args.lib_path, log,
                                 args.documents if t % max(1, args.documents) == 0 else 0)
        outputs = read_outputs(work_dir, shape)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        result.update(ok=False, failure=str(e))
        print(f"FAIL {shape}: {e}", flush=True)
        return result
    tessera = {name: (bits_to_torch(a, dev).double() if name != "lse" else torch.from_numpy(a).to(dev).double())
               for name, a in outputs.items()}

    ref = reference_fp32(q, k, v, dout)
    ref = {name: x.double() for name, x in ref.items()}
    errors = {name: relative_l2(tessera[name], ref[name]) for name in TOLERANCES}
    result["errors"] = {"tessera": errors}
    print(errors_line(shape, "tessera", errors), flush=True)
    del tessera

    qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
    gqa = h != kv

    def forward():
        return F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=gqa)

    def forward_backward():
        torch.autograd.grad(forward(), (qg, kg, vg), dout)

    usable = []
    for name in SDPA_BACKENDS:  # SDPA's bf16 errors against the same reference, for scale
        try:
            with sdpa_kernel(sdpa_backend(name)):
                o = forward()
                dq, dk, dv = torch.autograd.grad(o, (qg, kg, vg), dout)
            got = {"out": o.double(), "dq": dq.double(), "dk": dk.double(), "dv": dv.double()}
            e = {n: relative_l2(got[n], ref[n]) for n in got}
            result["errors"][name] = e
            print(errors_line(shape, name, e), flush=True)
            del o, dq, dk, dv, got
            wrong = [n for n in e if not e[n] <= TOLERANCES[n]]
            if wrong:  # held to the same tolerances: no speed for wrong outputs, theirs either
                result["sdpa_errors"][name] = f"outputs disagree with the reference ({', '.join(wrong)})"
                print(f"{name} at {shape}: {result['sdpa_errors'][name]}; not timed", flush=True)
            else:
                usable.append(name)
        except RuntimeError as ex:
            result["sdpa_errors"][name] = str(ex).splitlines()[0][:200]
            print(f"{name} unavailable at {shape}: {result['sdpa_errors'][name]}", flush=True)
    del ref
    if dev.startswith("cuda"):
        torch.cuda.empty_cache()

    failed = check(errors)
    result["ok"] = not failed
    if failed:
        print(f"FAIL {shape}: tessera {', '.join(failed)} above tolerance "
              f"({', '.join(f'{n} {errors[n]:.2e} > {TOLERANCES[n]:.0e}' for n in failed)})", flush=True)
        return result

    if "documents" in tessera_run:
        result["documents"] = document_record(shape, tessera_run)
        print(json.dumps(result["documents"]), flush=True)
    result["repeat_bitwise_equal"] = tessera_run.get("repeat_bitwise_equal")
    result["device"] = tessera_run.get("device")
    result["timings"]["tessera"] = timing_record(shape, "tessera", tessera_run["fwd_ms"], tessera_run["fwdbwd_ms"])
    for name in usable:
        with sdpa_kernel(sdpa_backend(name)):
            fwd_ms = time_ms(forward, args.warmup, args.reps, dev)
            fwdbwd_ms = time_ms(forward_backward, args.warmup, args.reps, dev)
        result["timings"][name] = timing_record(shape, name, fwd_ms, fwdbwd_ms)
        result.setdefault("ratios", {})[name] = speed_ratios(result["timings"]["tessera"],
                                                              result["timings"][name])
    if "documents" in result and "cudnn" in usable:
        cudnn_on_separate_documents(result, q, k, v, dout, args, dev)
    return result


def cudnn_on_separate_documents(result, q, k, v, dout, args, dev):
    """SDPA's cuDNN backend on the documents as separate causal sequences (no library we
    compare with takes packed boundaries through SDPA): the same unmasked FLOPs, so its rate
    over its own whole-sequence run says how much any tiled kernel loses to short documents.
    Checked against the fp32 reference of those sequences before it is timed."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    doc = result["documents"]
    n = doc["documents"]
    b, h, t, d = q.shape
    kv = k.shape[1]

    def split(x):  # [B, heads, N * L, D] -> [B * N, heads, L, D]
        return x.reshape(b, x.shape[1], n, t // n, d).transpose(1, 2).reshape(b * n, x.shape[1], t // n, d)

    qs, ks, vs, dos = (split(x).contiguous() for x in (q, k, v, dout))
    ref = reference_fp32(qs, ks, vs, dos)
    qg, kg, vg = (x.detach().clone().requires_grad_() for x in (qs, ks, vs))

    def forward():
        return F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=h != kv)

    def forward_backward():
        torch.autograd.grad(forward(), (qg, kg, vg), dos)

    with sdpa_kernel(sdpa_backend("cudnn")):
        o = forward()
        dq, dk, dv = torch.autograd.grad(o, (qg, kg, vg), dos)
        got = {"out": o, "dq": dq, "dk": dk, "dv": dv}
        errors = {name: relative_l2(got[name].double(), ref[name].double()) for name in got}
        del o, dq, dk, dv, got, ref
        wrong = [name for name in errors if not errors[name] <= TOLERANCES[name]]
        if wrong:
            doc["cudnn_separate"] = f"outputs disagree with the reference ({', '.join(wrong)}); not timed"
            return
        fwdbwd_ms = time_ms(forward_backward, args.warmup, args.reps, dev)
    masked_flops = attention_flops(tuple(result["shape"]))[1] / n
    whole = result["timings"]["cudnn"]
    doc["cudnn_separate_fwdbwd_ms"] = round(fwdbwd_ms, 4)
    doc["cudnn_separate_fwdbwd_tflops"] = round(masked_flops / fwdbwd_ms / 1e9, 1)
    doc["cudnn_separate_rate_over_whole_sequence"] = round(
        doc["cudnn_separate_fwdbwd_tflops"] / whole["fwdbwd_tflops"], 3)
    print(json.dumps({"cudnn_on_separate_documents": {k_: doc[k_] for k_ in doc if k_.startswith("cudnn_")}}),
          flush=True)


def gpu_main(args):
    import torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("attention_bench.py: no CUDA device", file=sys.stderr)
        return 1
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    try:  # the fp32 reference must be true fp32, not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
    except Exception as e:  # noqa: BLE001 - a newer API may refuse the old switch; report it
        print(f"note: could not set allow_tf32=False: {e}", flush=True)
    shapes = args.shape or DEFAULT_SHAPES
    for s in shapes:
        if s[1] % s[2] != 0:
            print(f"attention_bench.py: KV={s[2]} must divide H={s[1]} in {s}", file=sys.stderr)
            return 2
    print(json.dumps({"gpu": device_name, "torch": torch.__version__,
                      "cudnn": torch.backends.cudnn.version(), "warmup": args.warmup, "reps": args.reps}),
          flush=True)
    work_dir = tempfile.mkdtemp(prefix="attention_bench_", dir=args.work_dir)
    log_path = args.log or os.path.join(work_dir, "binary.log")
    results = []
    try:
        with open(log_path, "a") as log:
            for shape in shapes:
                results.append(run_shape_on_gpu(tuple(shape), args, work_dir, log))
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()  # the shape's tensors went with its frame
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    ok = all(r.get("ok") for r in results)
    summary = {"ok": ok, "gpu": device_name, "torch": torch.__version__,
               "tolerances": TOLERANCES, "warmup": args.warmup, "reps": args.reps, "results": results}
    if not ok:  # no speeds at all when any output is wrong
        for r in results:
            r.pop("timings", None)
            r.pop("ratios", None)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(summary, f, indent=1)
    if not ok:
        print("\nattention_bench.py: Tessera's outputs disagree with the fp32 reference; no speed "
              "is reported. Errors (relative L2):", file=sys.stderr)
        for r in results:
            print(f"  {tuple(r['shape'])}: {r.get('failure') or r['errors']['tessera']}", file=sys.stderr)
        return 1
    atomic = os.environ.get("TESSERA_BENCH_ATTENTION", "").endswith("_atomic")
    for r in results:
        if r.get("repeat_bitwise_equal") is False and not atomic:
            print(f"WARNING {tuple(r['shape'])}: a repeated Tessera run gave different bits "
                  "(the ops API promises deterministic attention)", flush=True)
        for kernel, t in r["timings"].items():
            line = dict(t)
            if kernel != "tessera":
                line["tessera_speed_over_this"] = r["ratios"][kernel]
            print(json.dumps(line), flush=True)
    table = markdown_table(results)
    if args.table_out:
        with open(args.table_out, "w") as f:
            f.write(table + "\n")
    print()
    print(table)
    return 0


def parse_shape(text):
    parts = tuple(int(p) for p in text.split(","))
    if len(parts) != 5 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"expected B,H,KV,T,D (positive), got {text!r}")
    return parts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib-path", default="", help="prepended to LD_LIBRARY_PATH for the binary only")
    p.add_argument("--shape", type=parse_shape, action="append",
                   help="B,H,KV,T,D (repeatable); replaces the default shapes")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--documents", type=int, default=0,
                   help="also time each shape whose T it divides as N packed equal documents "
                        "(checked against the documents run as separate sequences)")
    p.add_argument("--json-out", help="write every result here")
    p.add_argument("--table-out", help="also write the Markdown table here")
    p.add_argument("--log", help="append the binary's output here")
    p.add_argument("--work-dir", default=None, help="where the input/output files go (default: system temp)")
    p.add_argument("--device", default="cuda",
                   help="cuda (the benchmark), or cpu for a dry run of this path with the CPU engine")
    p.add_argument("--binary", required=True,
                   help="path to attention_bench (bazel-bin/bench/attention_bench or BUNDLE/bin/)")
    args = p.parse_args()
    if args.warmup < 0 or args.reps < 1:
        p.error("--warmup >= 0 and --reps >= 1")
    return gpu_main(args)


if __name__ == "__main__":
    sys.exit(main())
