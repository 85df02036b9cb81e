#!/usr/bin/env python3
"""PyTorch 1.13 beside `attend train --config configs/gpt.json` on the Brown corpus (issue 8): the same GPT
(learned positions, pre-LN, tanh-GELU, tied head, biases, residual dropout), the same token streams (Attend's
cache in RUN/data/train.tokens and valid.tokens, int32), the same batch, sequence length, AdamW settings,
clipping and warm-up + cosine schedule, read from RUN/run.json. Writes OUT/metrics.jsonl in Attend's format
(step, loss, lr, elapsed_s, val_loss) so that both curves go on one plot:

    source bench/peer_env.sh; /usr/bin/python3 bench/brown_torch.py --run runs/brown-gpt --out runs/brown-torch
    build/attend plot runs/brown-gpt/metrics.jsonl runs/brown-torch/metrics.jsonl --y val_loss --x elapsed_s -o brown.svg

Initialisation is Attend's (GPT-2's): matrices and embeddings N(0, init_std²), the residual output
projections (attention out, MLP down) divided by √(2·layers), biases 0. Batches are drawn as Attend draws
them, each epoch a seeded shuffle of the non-overlapping windows of T + 1 tokens, though not Attend's exact
permutation; the comparison is of loss against time.
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn

from train_torch import GPT  # the same model as the throughput benchmark (bench/train_torch.py)


def lr_at(t, tr, steps):
    if t <= tr["warmup_steps"]:
        return tr["lr"] * t / max(1, tr["warmup_steps"])
    progress = min(1.0, (t - tr["warmup_steps"]) / max(1, steps - tr["warmup_steps"]))
    return tr["min_lr"] + (tr["lr"] - tr["min_lr"]) * 0.5 * (1 + math.cos(math.pi * progress))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--run", required=True, help="an Attend run directory (run.json and data/*.tokens)")
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=60.0, help="wall-clock budget")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    run = json.load(open(os.path.join(a.run, "run.json")))
    m, d, tr = run["model"], run["data"], run["train"]
    train = torch.from_numpy(np.fromfile(os.path.join(a.run, "data", "train.tokens"), dtype=np.int32).astype(np.int64))
    valid = torch.from_numpy(np.fromfile(os.path.join(a.run, "data", "valid.tokens"), dtype=np.int32).astype(np.int64))
    B, T = d["batch_size"], d["seq_len"]
    model = GPT(m["n_layers"], m["d_model"], m["n_heads"], m["vocab_size"], m["max_seq_len"], m["residual_dropout"])
    for name, p in model.named_parameters():
        if p.dim() == 2:
            scaled = name.endswith(".o.weight") or name.endswith(".down.weight")  # residual outputs
            nn.init.normal_(p, std=m["init_std"] / (math.sqrt(2 * m["n_layers"]) if scaled else 1.0))
        elif name.endswith(".bias"):
            nn.init.zeros_(p)
    decay = [p for p in model.parameters() if p.dim() == 2 and p is not model.tok.weight and p is not model.pos.weight]
    rest = [p for p in model.parameters() if all(p is not q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tr["weight_decay"]}, {"params": rest, "weight_decay": 0.0}],
                            betas=(tr["beta1"], tr["beta2"]), eps=tr["eps"])
    windows = (len(valid) - 1) // T
    starts = [w * T for w in range(min(windows, d["max_valid_batches"] * B))]

    @torch.no_grad()
    def validation():
        model.eval()
        total, n = 0.0, 0
        for i in range(0, len(starts), B):
            ids = torch.stack([valid[s:s + T + 1] for s in starts[i:i + B]])
            total += model(ids[:, :-1], ids[:, 1:]).item() * ids.shape[0]
            n += ids.shape[0]
        model.train()
        return total / n

    os.makedirs(a.out, exist_ok=True)
    gen = torch.Generator().manual_seed(d["seed"])
    train_windows = (len(train) - 1) // T

    def window_starts():  # epoch after epoch, a shuffle of the non-overlapping windows
        while True:
            yield from (int(w) * T for w in torch.randperm(train_windows, generator=gen))

    next_start = window_starts()
    elapsed, steps = 0.0, tr["steps"]
    with open(os.path.join(a.out, "metrics.jsonl"), "w") as out:
        for t in range(1, steps + 1):
            start = time.perf_counter()
            ids = torch.stack([train[s:s + T + 1] for s in (next(next_start) for _ in range(B))])
            for g in opt.param_groups:
                g["lr"] = lr_at(t, tr, steps)
            loss = model(ids[:, :-1], ids[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tr["clip_norm"])
            opt.step()
            elapsed += time.perf_counter() - start
            line = {"step": t, "loss": loss.item(), "lr": lr_at(t, tr, steps), "elapsed_s": elapsed}
            if t % tr["eval_every"] == 0 or t == steps or elapsed > 60 * a.minutes:
                line["val_loss"] = validation()
            out.write(json.dumps(line) + "\n")
            out.flush()
            if elapsed > 60 * a.minutes:
                break


if __name__ == "__main__":
    main()
