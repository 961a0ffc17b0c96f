"""Dry-runs a bench script's PyTorch path on a machine without a GPU.

The benchmark scripts here are run once, on a GPU host with PyTorch 2.11, so
their torch code must be right the first time. This wrapper runs one of them
on the CPU (pass the script's own --device cpu flag) with whatever PyTorch
the development machine has. Debian 12's python3-torch is 1.13, which lacks
a few 2.x APIs the scripts call; for those only, it installs small
stand-ins before running the script:

  * F.scaled_dot_product_attention (with is_causal, scale, enable_gqa),
    computed with plain matmuls; under sdpa_kernel(CUDNN_ATTENTION) it raises
    RuntimeError("No available kernel"), so the unavailable-backend path
    runs too;
  * torch.nn.attention.SDPBackend and sdpa_kernel;
  * torch.nn.RMSNorm;
  * torch.compile (returns the module unchanged: nothing is compiled);
  * torch.distributed.fsdp.fully_shard and MixedPrecisionPolicy (FSDP2):
    fully_shard returns the module unchanged, so nothing is sharded and
    each rank trains its own replica; the launch, the process group, the
    model, the loop and the report still run.

With PyTorch 2.x installed nothing is replaced. Timings from a dry run mean
nothing; it checks shapes, layouts, file protocols and the report.

    python3 bench/cpu_dryrun.py bench/attention_bench.py --device cpu --binary ... --shape 1,4,2,64,16
    python3 bench/cpu_dryrun.py bench/torch_baseline.py --device cpu --jobspec spec.json ...
    python3 -m torch.distributed.run --nproc_per_node=2 bench/cpu_dryrun.py \
        bench/torch_fsdp_baseline.py --device cpu --jobspec spec.json ...
"""
import contextlib
import enum
import importlib.util
import math
import runpy
import sys
import types

import torch
import torch.nn.functional as F

_allowed_backends = [None]  # None: any


def _install_sdpa():
    class SDPBackend(enum.IntEnum):
        ERROR = -1
        MATH = 0
        FLASH_ATTENTION = 1
        EFFICIENT_ATTENTION = 2
        CUDNN_ATTENTION = 3

    @contextlib.contextmanager
    def sdpa_kernel(backends):
        previous = _allowed_backends[0]
        _allowed_backends[0] = list(backends) if isinstance(backends, (list, tuple)) else [backends]
        try:
            yield
        finally:
            _allowed_backends[0] = previous

    def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        allowed = _allowed_backends[0]
        if allowed is not None and allowed == [SDPBackend.CUDNN_ATTENTION]:
            raise RuntimeError("No available kernel. Aborting execution. (cpu_dryrun stand-in)")
        assert attn_mask is None and dropout_p == 0.0, "stand-in supports causal attention only"
        if q.shape[-3] != k.shape[-3]:
            if not enable_gqa:
                raise RuntimeError("query and key head counts differ and enable_gqa is False")
            group = q.shape[-3] // k.shape[-3]
            k = k.repeat_interleave(group, dim=-3)
            v = v.repeat_interleave(group, dim=-3)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        if is_causal:
            t_q, t_k = q.shape[-2], k.shape[-2]
            future = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).triu(1)
            s = s.masked_fill(future, float("-inf"))
        return torch.matmul(torch.softmax(s.float(), dim=-1).to(q.dtype), v)

    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = SDPBackend
    attention.sdpa_kernel = sdpa_kernel
    sys.modules["torch.nn.attention"] = attention
    torch.nn.attention = attention
    F.scaled_dot_product_attention = scaled_dot_product_attention


class _RMSNorm(torch.nn.Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(normalized_shape, device=device, dtype=dtype))

    def forward(self, x):
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight


def _install_fsdp2(fsdp):
    class MixedPrecisionPolicy:
        def __init__(self, param_dtype=None, reduce_dtype=None, output_dtype=None,
                     cast_forward_inputs=True):
            self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype
            self.output_dtype, self.cast_forward_inputs = output_dtype, cast_forward_inputs

    def fully_shard(module, **kwargs):
        return module

    fsdp.MixedPrecisionPolicy = MixedPrecisionPolicy
    fsdp.fully_shard = fully_shard
    sys.modules["torch.distributed.fsdp"] = fsdp
    torch.distributed.fsdp = fsdp


def install():
    has_sdpa = (hasattr(F, "scaled_dot_product_attention")
                and importlib.util.find_spec("torch.nn.attention") is not None)
    if not has_sdpa:
        _install_sdpa()
    if not hasattr(torch.nn, "RMSNorm"):
        torch.nn.RMSNorm = _RMSNorm
    if not hasattr(torch, "compile"):
        torch.compile = lambda module, **kwargs: module
    if torch.distributed.is_available():
        try:
            import torch.distributed.fsdp as fsdp
        except Exception:  # 1.13's FSDP1 does not import under Python 3.11
            fsdp = types.ModuleType("torch.distributed.fsdp")
        if not hasattr(fsdp, "fully_shard"):
            _install_fsdp2(fsdp)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: cpu_dryrun.py SCRIPT [ARGS...]")
    install()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
