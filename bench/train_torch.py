#!/usr/bin/env python3
"""The PyTorch 1.13 peer of attend_train_bench: the same GPT (learned positions, pre-LN, tanh-GELU, tied LM
head, biases), the same shapes, AdamW, fp32, forward + backward + step on random tokens.

    source bench/peer_env.sh; /usr/bin/python3 bench/train_torch.py --shape S --steps 6 --threads 2

Prints one JSON line like attend_train_bench: median tokens/s after the first step, and peak RSS.
"""
import argparse
import json
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {"S": dict(L=6, d=384, H=6, V=8192, T=256, B=8), "gpt2": dict(L=12, d=768, H=12, V=50257, T=256, B=4)}


class Block(nn.Module):
    def __init__(self, d, H, dropout=0.0):
        super().__init__()
        self.H, self.dropout = H, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else self.attend(q, k, v, T)
        x = x + self.drop(self.o(a.transpose(1, 2).reshape(B, T, C)))
        return x + self.drop(self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh")))

    def drop(self, x):  # residual dropout; none at all at rate 0 (the throughput benchmark)
        return F.dropout(x, self.dropout, self.training) if self.dropout > 0 else x

    @staticmethod
    def attend(q, k, v, T):
        s = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return s.softmax(-1) @ v


class GPT(nn.Module):
    """Attend's decoder defaults: learned positions, pre-LN, tanh-GELU, tied LM head, biases, residual dropout."""

    def __init__(self, L, d, H, V, positions=1024, dropout=0.0, **_):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, d), nn.Embedding(positions, d)
        self.blocks = nn.ModuleList(Block(d, H, dropout) for _ in range(L))
        self.ln = nn.LayerNorm(d)

    def forward(self, ids, targets):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.ln(x) @ self.tok.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="S", choices=SHAPES)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    s = SHAPES[a.shape]
    model = GPT(**s)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rates = []
    for step in range(a.steps):
        ids = torch.randint(0, s["V"], (s["B"], s["T"] + 1))
        start = time.perf_counter()
        loss = model(ids[:, :-1], ids[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - start
        if step > 0:
            rates.append(s["B"] * s["T"] / seconds)
    rates.sort()
    print(json.dumps({"impl": f"pytorch {torch.__version__}", "shape": a.shape, "threads": a.threads,
                      "params": sum(p.numel() for p in model.parameters()), "tokens_per_s": round(rates[len(rates) // 2], 1),
                      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


if __name__ == "__main__":
    main()
