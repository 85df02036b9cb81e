#!/usr/bin/env python3
"""Makes tests/data/kernels_golden.json: PyTorch's values and gradients for Attend's kernels.

Uses Debian's python3-torch (1.13). Everything is computed in float64 so that the test can hold the
fp64 kernels to 1e-10. Each case stores its inputs, an upstream gradient `up`, the outputs, and the
gradients of sum(up * output) with respect to every differentiable input.

    python3 tools/make_kernel_fixtures.py   # rewrites tests/data/kernels_golden.json
"""
import json
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(1234)
torch.set_default_dtype(torch.float64)


def rand(*shape, lo=-1.0, hi=1.0):
    return (lo + (hi - lo) * torch.rand(*shape)).requires_grad_(True)


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def case(inputs, outputs, ints=None):
    """Backpropagates sum(up * out) for each output and records values and gradients."""
    result = {"inputs": {k: flat(v) for k, v in inputs.items()}, "ints": ints or {}, "outputs": {}, "grads": {}}
    total = 0.0
    for name, out in outputs.items():
        up = torch.rand(out.shape) * 2 - 1
        result["inputs"]["up_" + name] = flat(up)
        result["outputs"][name] = flat(out)
        total = total + (up * out).sum()
    grads = torch.autograd.grad(total, [v for v in inputs.values() if v.requires_grad], allow_unused=True)
    for (name, v), g in zip([(k, v) for k, v in inputs.items() if v.requires_grad], grads):
        result["grads"][name] = flat(g if g is not None else torch.zeros_like(v))
    return result


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """T5's relative position bucket, written from the published algorithm (float32 logarithms)."""
    ret = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        ret += (rel > 0).to(torch.long) * num_buckets
        n = torch.abs(rel)
    else:
        n = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return ret + torch.where(is_small, n, large)


def rope(x, positions, base=10000.0):
    """Rotates consecutive pairs (2i, 2i+1) of the last dimension, as in the notes (003 §8.2)."""
    d = x.shape[-1]
    theta = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = positions[:, None] * theta[None, :]  # (T, d/2)
    cos, sin = torch.cos(angles)[:, None, :], torch.sin(angles)[:, None, :]  # broadcast over heads
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return out.reshape(x.shape)


cases = {}
N, C, V, OC = 7, 13, 11, 5

x, w, b = rand(N, C), rand(OC, C), rand(OC)
cases["linear"] = case({"x": x, "weight": w, "bias": b}, {"out": F.linear(x, w, b)})

table = rand(V, C)
ids = [3, 0, 10, 3, 7, 3, 1]
cases["embedding"] = case({"table": table}, {"out": F.embedding(torch.tensor(ids), table)}, {"ids": ids})

x, w, b = rand(N, C, lo=-2, hi=3), rand(C), rand(C)
cases["layer_norm"] = case({"x": x, "weight": w, "bias": b}, {"out": F.layer_norm(x, (C,), w, b, eps=1e-5)})

x, w = rand(N, C, lo=-2, hi=3), rand(C)
rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # LLaMA's RMSNorm
cases["rms_norm"] = case({"x": x, "weight": w}, {"out": rms})

z = rand(N, V, lo=-3, hi=3)
cases["softmax_t0.7"] = case({"z": z}, {"out": torch.softmax(z / 0.7, dim=-1)})
z = rand(N, V, lo=-3, hi=3)
cases["log_softmax"] = case({"z": z}, {"out": torch.log_softmax(z, dim=-1)})
z = rand(N, V, lo=-3, hi=3)
cases["logsumexp"] = case({"z": z}, {"out": torch.logsumexp(z, dim=-1)})

z = rand(N, V, lo=-3, hi=3)
targets = [4, 0, -100, 10, 7, -100, 4]
ce = F.cross_entropy(z, torch.tensor(targets), ignore_index=-100, label_smoothing=0.1, reduction="none")
cases["cross_entropy_ls0.1"] = case({"z": z}, {"out": ce}, {"targets": targets})

for name, fn in [("relu", F.relu), ("gelu", F.gelu), ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")),
                 ("silu", F.silu)]:
    x = rand(N, C, lo=-4, hi=4)
    cases["act_" + name] = case({"x": x}, {"out": fn(x)})

gate, up = rand(N, C, lo=-4, hi=4), rand(N, C)
cases["swiglu"] = case({"gate": gate, "up_in": up}, {"out": F.silu(gate) * up})

a, b2 = rand(N, C), rand(N, C)
cases["cosine_similarity"] = case({"a": a, "b": b2}, {"out": F.cosine_similarity(a, b2, dim=1, eps=1e-8)})
a, b2 = rand(N, C), rand(N, C)
cases["euclidean_distance"] = case({"a": a, "b": b2}, {"out": torch.linalg.vector_norm(a - b2, dim=1)})

T, H, D = 7, 3, 8
x = rand(2, T, H, D)
cases["rope_start5"] = case({"x": x}, {"out": rope(x, torch.arange(5, 5 + T, dtype=torch.float64))})

rel = torch.arange(-300, 301)
cases["t5_buckets"] = {
    "ints": {
        "relative": rel.tolist(),
        "bidirectional_32_128": t5_bucket(rel, True, 32, 128).tolist(),
        "causal_32_128": t5_bucket(rel, False, 32, 128).tolist(),
        "bidirectional_8_16": t5_bucket(rel, True, 8, 16).tolist(),
    }
}

pos = torch.arange(0, 9, dtype=torch.float64)[:, None]
i2 = torch.arange(0, 12, 2, dtype=torch.float64)[None, :]
pe = torch.zeros(9, 12)
pe[:, 0::2] = torch.sin(pos / 10000 ** (i2 / 12))
pe[:, 1::2] = torch.cos(pos / 10000 ** (i2 / 12))
cases["sinusoidal_9x12"] = {"outputs": {"out": flat(pe)}}

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "kernels_golden.json")
with open(path + ".tmp", "w") as f:
    json.dump({"generator": f"tools/make_kernel_fixtures.py with torch {torch.__version__}", "cases": cases}, f)
os.replace(path + ".tmp", path)
print(f"wrote {os.path.normpath(path)}: {len(cases)} cases")
