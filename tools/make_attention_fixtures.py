#!/usr/bin/env python3
"""Makes tests/data/attention_golden.json: PyTorch's multi-head attention on small problems.

Uses Debian's python3-torch (1.13), in float64. Four cases:
  mha_causal_padding   torch.nn.MultiheadAttention itself (fused in_proj, biases), causal + key padding
  gqa_rope_causal      grouped-query attention (4 query heads, 2 key/value heads) with RoPE, no biases
  alibi_padding        bidirectional attention with ALiBi biases and key padding
  t5_cross             cross-attention with T5's learned relative position bias, scale 1, key padding
Each stores the weights in Attend's layout (qkv or q + kv fused, rows q then k then v), the inputs, an
upstream gradient, the output, and the gradients of sum(up * output).

    /usr/bin/python3 tools/make_attention_fixtures.py
"""
import json
import math
import os

import torch

torch.manual_seed(2024)
torch.set_default_dtype(torch.float64)
B, T, C, H = 2, 5, 16, 4
D = C // H


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def rope(x, positions, base=10000.0):
    """x (B, T, heads, D): rotate consecutive pairs (2i, 2i+1) by pos * base^(-2i/D)."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions[:, None] * theta[None, :]
    cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    e, o = x[..., 0::2], x[..., 1::2]
    return torch.stack([e * cos - o * sin, e * sin + o * cos], dim=-1).reshape(x.shape)


def alibi_slopes(n):
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / n) for h in range(n)])


def t5_bucket(rel, num_buckets, max_distance):
    """T5's bidirectional relative position bucket (float32 logarithms, as the reference does)."""
    num_buckets //= 2
    ret = (rel > 0).to(torch.long) * num_buckets
    n = torch.abs(rel)
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return ret + torch.where(n < max_exact, n, large)


def attend(q, k, v, scale, bias=None, mask=None):
    """q (B, Tq, H, D), k/v (B, Tk, Hkv, D) with kv heads repeated to H; mask True = may attend."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if bias is not None:
        s = s + bias
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1), v)


def padding_mask(lengths, Tq, Tk):
    return (torch.arange(Tk)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :].expand(-1, 1, Tq, Tk)


def record(name, weights, inputs, out, extra=None):
    up = torch.rand(out.shape) * 2 - 1
    leaves = {**weights, **inputs}
    grads = torch.autograd.grad((out * up).sum(), list(leaves.values()))
    case = {"weights": {k: flat(v) for k, v in weights.items()}, "inputs": {k: flat(v) for k, v in inputs.items()},
            "shapes": {k: list(v.shape) for k, v in leaves.items()}, "up": flat(up), "out": flat(out),
            "grads": {k: flat(g) for k, g in zip(leaves, grads)}}
    case.update(extra or {})
    cases[name] = case


def param(*shape):
    return (torch.randn(*shape) * 0.3).requires_grad_()


cases = {}

# 1. nn.MultiheadAttention: in_proj_weight is Attend's fused qkv (rows q, k, v).
mha = torch.nn.MultiheadAttention(C, H, bias=True, batch_first=True)
with torch.no_grad():
    mha.in_proj_bias.uniform_(-0.3, 0.3)
    mha.out_proj.bias.uniform_(-0.3, 0.3)
x = torch.randn(B, T, C).requires_grad_()
lengths = [5, 3]
causal = torch.ones(T, T, dtype=torch.bool).triu(1)               # True = masked, as PyTorch wants
padding = torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]
out, _ = mha(x, x, x, attn_mask=causal, key_padding_mask=padding, need_weights=False)
record("mha_causal_padding", {"qkv.weight": mha.in_proj_weight, "qkv.bias": mha.in_proj_bias,
                              "o.weight": mha.out_proj.weight, "o.bias": mha.out_proj.bias},
       {"x": x}, out, {"key_lengths": lengths, "causal": True})

# 2. GQA + RoPE, causal, no biases.
Hkv = 2
wq, wk, wv, wo = param(H * D, C), param(Hkv * D, C), param(Hkv * D, C), param(C, H * D)
x = torch.randn(B, T, C).requires_grad_()
pos = torch.arange(T, dtype=torch.float64)
q = rope((x @ wq.T).view(B, T, H, D), pos)
k = rope((x @ wk.T).view(B, T, Hkv, D), pos)
v = (x @ wv.T).view(B, T, Hkv, D)
mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
out = attend(q, k, v, 1 / math.sqrt(D), mask=mask).reshape(B, T, H * D) @ wo.T
record("gqa_rope_causal", {"wq": wq, "wk": wk, "wv": wv, "o.weight": wo}, {"x": x}, out,
       {"n_kv_heads": Hkv, "causal": True})

# 3. ALiBi, bidirectional, key padding, biases.
wqkv, bqkv, wo, bo = param(3 * C, C), param(3 * C), param(C, C), param(C)
x = torch.randn(B, T, C).requires_grad_()
proj = x @ wqkv.T + bqkv
q, k, v = (proj[..., i * C:(i + 1) * C].reshape(B, T, H, D) for i in range(3))
dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs()
bias = -alibi_slopes(H)[:, None, None] * dist[None]
lengths = [5, 2]
out = attend(q, k, v, 1 / math.sqrt(D), bias=bias[None], mask=padding_mask(lengths, T, T)).reshape(B, T, C) @ wo.T + bo
record("alibi_padding", {"qkv.weight": wqkv, "qkv.bias": bqkv, "o.weight": wo, "o.bias": bo}, {"x": x}, out,
       {"key_lengths": lengths, "causal": False})

# 4. Cross-attention with T5's relative bias (8 buckets, max distance 16), scale 1, no biases.
Tk, NB, MD = 7, 8, 16
wq, wkv, wo, table = param(C, C), param(2 * C, C), param(C, C), param(NB, H)
x, ctx = torch.randn(B, T, C).requires_grad_(), torch.randn(B, Tk, C).requires_grad_()
q = (x @ wq.T).view(B, T, H, D)
kv = ctx @ wkv.T
k, v = kv[..., :C].reshape(B, Tk, H, D), kv[..., C:].reshape(B, Tk, H, D)
rel = torch.arange(Tk)[None, :] - torch.arange(T)[:, None]
bias = table[t5_bucket(rel, NB, MD)].permute(2, 0, 1)  # (H, T, Tk)
lengths = [7, 4]
out = attend(q, k, v, 1.0, bias=bias[None], mask=padding_mask(lengths, T, Tk)).reshape(B, T, C) @ wo.T
record("t5_cross", {"q.weight": wq, "kv.weight": wkv, "o.weight": wo, "relative_attention_bias": table},
       {"x": x, "context": ctx}, out, {"key_lengths": lengths, "causal": False, "Tk": Tk})

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "attention_golden.json")
with open(path + ".tmp", "w") as f:
    json.dump({"generator": f"tools/make_attention_fixtures.py with torch {torch.__version__}",
               "B": B, "T": T, "C": C, "H": H, "cases": cases}, f)
os.replace(path + ".tmp", path)
print(f"wrote {os.path.normpath(path)}: {len(cases)} cases")
