#!/usr/bin/env python3
"""The PyTorch 1.13 peer of attend_generate_bench: a GPT-2-124M-shaped model (random weights, fp32, batch 1)
with a KV cache in plain torch (the transformers package is not available here): the prompt in one forward,
then one token per forward, greedy.

    source bench/peer_env.sh; /usr/bin/python3 bench/generate_torch.py --prompt 512 --new 128 --threads 2
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

L, C, H, V, P = 12, 768, 12, 50257, 1024


def block_weights():
    r = lambda *s: torch.randn(*s) * 0.02
    return dict(ln1=(torch.ones(C), torch.zeros(C)), qkv=(r(3 * C, C), torch.zeros(3 * C)), o=(r(C, C), torch.zeros(C)),
                ln2=(torch.ones(C), torch.zeros(C)), up=(r(4 * C, C), torch.zeros(4 * C)), down=(r(C, 4 * C), torch.zeros(C)))


@torch.no_grad()
def forward(ids, start, W, cache):
    """ids (1, T) at positions start..; cache: per layer [k, v] of (1, H, t, d) or None. Returns last logits."""
    T = ids.shape[1]
    x = W["wte"][ids] + W["wpe"][start:start + T]
    for l, b in enumerate(W["blocks"]):
        h = F.layer_norm(x, (C,), *b["ln1"])
        q, k, v = F.linear(h, *b["qkv"]).split(C, dim=2)
        q, k, v = (t.view(1, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        if cache[l] is not None:
            k, v = torch.cat([cache[l][0], k], dim=2), torch.cat([cache[l][1], v], dim=2)
        cache[l] = [k, v]
        s = (q @ k.transpose(-2, -1)) / (C // H) ** 0.5
        if T > 1:
            s = s.masked_fill(torch.ones(T, k.shape[2], dtype=torch.bool).triu(k.shape[2] - T + 1), float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(1, T, C)
        x = x + F.linear(a, *b["o"])
        h = F.layer_norm(x, (C,), *b["ln2"])
        x = x + F.linear(F.gelu(F.linear(h, *b["up"]), approximate="tanh"), *b["down"])
    x = F.layer_norm(x[:, -1], (C,), *W["lnf"])
    return x @ W["wte"].t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--passes", type=int, default=2, help="measured passes after a warm-up (PyTorch is slow here)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    W = dict(wte=torch.randn(V, C) * 0.02, wpe=torch.randn(P, C) * 0.01, blocks=[block_weights() for _ in range(L)],
             lnf=(torch.ones(C), torch.zeros(C)))
    prompt = torch.randint(0, V, (1, a.prompt))
    prompt_s, rates, token_s = [], [], []
    for rep in range(a.passes + 1):  # the first pass warms up
        cache = [None] * L
        t0 = time.perf_counter()
        logits = forward(prompt, 0, W, cache)
        if rep:
            prompt_s.append(time.perf_counter() - t0)
        total = 0.0
        for i in range(a.new):
            nxt = logits.argmax(-1, keepdim=True)
            t0 = time.perf_counter()
            logits = forward(nxt, a.prompt + i, W, cache)
            dt = time.perf_counter() - t0
            total += dt
            if rep:
                token_s.append(dt)
        if rep:
            rates.append(a.new / total)
    prompt_s.sort(), rates.sort(), token_s.sort()
    med = lambda v, q=0.5: v[min(len(v) - 1, int(q * len(v)))]
    print(json.dumps({"impl": f"pytorch {torch.__version__}", "threads": a.threads, "prompt": a.prompt, "new": a.new,
                      "prompt_tokens_per_s": round(a.prompt / med(prompt_s), 1), "ttft_ms": round(1e3 * med(prompt_s), 1),
                      "generate_tokens_per_s": round(med(rates), 1), "token_ms_p50": round(1e3 * med(token_s), 2),
                      "token_ms_p90": round(1e3 * med(token_s, 0.9), 2), "token_ms_p99": round(1e3 * med(token_s, 0.99), 2)}))


if __name__ == "__main__":
    main()
