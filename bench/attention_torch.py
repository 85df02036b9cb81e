#!/usr/bin/env python3
"""PyTorch 1.13's attention on the same problem as attend_attention_bench, one configuration per process.

    source bench/peer_env.sh; OMP_NUM_THREADS=2 python3 bench/attention_torch.py --T 4096

Causal softmax(QKᵀ/√d)V with the T×T scores materialised (PyTorch 1.13 has no fused attention on CPU),
forward and backward, batch 1, fp32. Prints one JSON line like the C++ benchmark.
"""
import argparse
import json
import math
import resource
import time

import torch


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--d-head", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    T, H, D = a.T, a.heads, a.d_head
    q = (torch.rand(1, H, T, D) - 0.5).requires_grad_()
    k = (torch.rand(1, H, T, D) - 0.5).requires_grad_()
    v = (torch.rand(1, H, T, D) - 0.5).requires_grad_()
    dout = torch.rand(1, H, T, D) - 0.5
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    baseline = peak_rss_mib()
    fwd, bwd = [], []
    for r in range(a.repeats + 1):  # r = 0 is the warm-up
        q.grad = k.grad = v.grad = None
        start = time.perf_counter()
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        f = time.perf_counter() - start
        start = time.perf_counter()
        out.backward(dout)
        b = time.perf_counter() - start
        del scores, out
        if r > 0:
            fwd.append(f)
            bwd.append(b)
    fwd.sort(), bwd.sort()
    f, b = fwd[len(fwd) // 2], bwd[len(bwd) // 2]
    print(json.dumps({"kernel": "pytorch-1.13", "T": T, "threads": a.threads, "forward_s": round(f, 4),
                      "backward_s": round(b, 4), "total_s": round(f + b, 4),
                      "extra_peak_mib": round(peak_rss_mib() - baseline)}))


if __name__ == "__main__":
    main()
