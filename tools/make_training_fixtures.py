#!/usr/bin/env python3
"""Makes tests/data/models/{gpt,t5}/training.json and trained_10.safetensors: 10 AdamW steps, by PyTorch.

Starts from the fixtures of tools/make_model_fixtures.py (config.json, model.safetensors and golden.json's first
case, whose Model class it imports) and, in float64 from the float32 weights, trains on that one batch 10 times:
  lr_t    linear warm-up over 3 steps to 1e-2, then cosine down to 1e-3 at step 10 (as src/train/schedule.cpp)
  loss    the case's loss, label smoothing 0.1 (mean cross-entropy over target positions)
  clip    global gradient norm; above 1.0 every gradient is scaled by exactly 1.0 / norm (no 1e-6, unlike
          torch.nn.utils.clip_grad_norm_; as src/train/clip.cpp)
  AdamW   torch.optim.AdamW, betas (0.9, 0.999), eps 1e-8, decoupled weight decay 0.1 on every parameter but
          biases, norms and embeddings (and T5's bias tables): as decays() in src/train/optimizer.cpp
training.json holds the settings and, per step, the loss (before the update), the gradient norm (before
clipping) and lr_t; trained_10.safetensors holds the final weights (F32, named as model.safetensors).

    /usr/bin/python3 tools/make_training_fixtures.py
"""
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mmf  # noqa: E402  (also sets float64 as the default dtype)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "models")
SETTINGS = {"steps": 10, "lr": 1e-2, "warmup_steps": 3, "total_steps": 10, "min_lr": 1e-3, "weight_decay": 0.1,
            "clip_norm": 1.0, "label_smoothing": 0.1, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}


def read_safetensors(path):
    """{name: float64 tensor} of an F32 file, in the file's order."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header, base, out = json.loads(data[8:8 + n]), 8 + n, {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", (path, name, h["dtype"])
        a, b = h["data_offsets"]
        values = struct.unpack(f"<{(b - a) // 4}f", data[base + a:base + b])
        out[name] = torch.tensor(values, dtype=torch.float64).reshape(h["shape"])
    return out


def schedule(t, s):
    if t <= s["warmup_steps"]:
        return s["lr"] * t / s["warmup_steps"]
    if t >= s["total_steps"]:
        return s["min_lr"]
    progress = (t - s["warmup_steps"]) / (s["total_steps"] - s["warmup_steps"])
    return s["min_lr"] + (s["lr"] - s["min_lr"]) * 0.5 * (1.0 + math.cos(math.pi * progress))


def decays(name):
    return not (name.endswith(".bias") or name == "mlm.bias" or "norm." in name or name.startswith("embed.")
                or name.endswith("relative_attention_bias"))


def train(name, s=SETTINGS):
    out = os.path.join(ROOT, name)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(out, "golden.json")) as f:
        case = json.load(f)["cases"][0]
    assert case["label_smoothing"] == s["label_smoothing"], case["label_smoothing"]
    model = mmf.Model(cfg)
    weights = read_safetensors(os.path.join(out, "model.safetensors"))
    assert list(weights) == list(model.P), "model.safetensors does not hold the model's tensors in order"
    model.P = {n: w.requires_grad_() for n, w in weights.items()}
    batch = mmf.as_tensors(case["batch"])

    params = list(model.P.values())
    opt = torch.optim.AdamW([{"params": [p for n, p in model.P.items() if decays(n)], "weight_decay": s["weight_decay"]},
                             {"params": [p for n, p in model.P.items() if not decays(n)], "weight_decay": 0.0}],
                            lr=s["lr"], betas=(s["beta1"], s["beta2"]), eps=s["eps"])
    losses, norms, lrs = [], [], []
    for t in range(1, s["steps"] + 1):
        lr_t = schedule(t, s)
        for group in opt.param_groups:
            group["lr"] = lr_t
        opt.zero_grad(set_to_none=False)
        _, ce, aux, _, _ = model.forward(batch, s["label_smoothing"])
        loss = ce + cfg["moe_aux_loss_weight"] * aux
        if t == 1:  # the same function as the model fixture
            assert abs(loss.item() - case["loss"]) < 1e-12, (loss.item(), case["loss"])
        loss.backward()
        with torch.no_grad():
            norm = math.sqrt(sum((p.grad * p.grad).sum().item() for p in params))
            if norm > s["clip_norm"]:
                for p in params:
                    p.grad.mul_(s["clip_norm"] / norm)
        opt.step()
        losses.append(loss.item()), norms.append(norm), lrs.append(lr_t)
        print(f"{name} step {t:2d}: lr {lr_t:.6f} loss {loss.item():.6f} grad norm {norm:.6f}")

    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump({**s, "case": case["name"], "losses": losses, "grad_norms": norms, "lrs": lrs}, f, indent=1)
        f.write("\n")
    mmf.write_safetensors(os.path.join(out, "trained_10.safetensors"), model.P)


if __name__ == "__main__":
    for model_name in ("gpt", "t5"):
        train(model_name)
