#!/usr/bin/env python3
"""Makes tests/data/hf-gpt2/: a tiny GPT-2 checkpoint in the exact Hugging Face layout, plus golden outputs.

Written in plain PyTorch (no `transformers`), float64 math on weights rounded to float32:
  config.json              HF GPT2LMHeadModel keys (vocab 50, 32 positions, n_embd 32, 2 layers, 4 heads)
  model.safetensors        F32, names as the hub's gpt2 (wte.weight, h.0.attn.c_attn.weight, ...): Conv1D
                           weights are [in, out] (y = x @ W + b), c_attn columns are [q | k | v]; includes the
                           old buffers h.{i}.attn.bias (causal mask) and h.{i}.attn.masked_bias; no lm_head
  prefixed/config.json     the same config
  prefixed/model.safetensors  the same weights named transformer.*, plus lm_head.weight (= wte)
  golden.json              prompt_ids (10), logits_shape [10, 50], logits (flat), greedy_ids (8 greedy steps)

    /usr/bin/python3 tools/make_gpt2_fixtures.py
"""
import json
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_py import read as read_safetensors, write as write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf-gpt2")

CONFIG = {
    "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 50, "n_positions": 32,
    "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": None, "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-05, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
    "initializer_range": 0.02, "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": True,
}
V, P, C, L, H = (CONFIG[k] for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"))
EPS = CONFIG["layer_norm_epsilon"]
N_PROMPT, N_GREEDY = 10, 8


def make_weights():
    """Seeded random weights (float32-rounded, held as float64), in hub order and naming."""
    torch.manual_seed(7)

    def r(std, *shape, mean=0.0):
        return (mean + std * torch.randn(*shape)).float().double()

    w = {"wte.weight": r(0.5, V, C), "wpe.weight": r(0.5, P, C)}
    for i in range(L):
        p = f"h.{i}."
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = r(0.1, C, mean=1.0), r(0.1, C)
        w[p + "attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P)
        w[p + "attn.masked_bias"] = torch.tensor(-10000.0)
        w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = r(0.2, C, 3 * C), r(0.1, 3 * C)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = r(0.2, C, C), r(0.1, C)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = r(0.1, C, mean=1.0), r(0.1, C)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = r(0.2, C, 4 * C), r(0.1, 4 * C)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = r(0.2, 4 * C, C), r(0.1, C)
    w["ln_f.weight"], w["ln_f.bias"] = r(0.1, C, mean=1.0), r(0.1, C)
    return w


def layer_norm(x, g, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased
    return (x - mu) / torch.sqrt(var + EPS) * g + b


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(w, ids):
    """Logits (T, V) for a 1-D list of token ids."""
    T, D = len(ids), C // H
    x = w["wte.weight"][torch.tensor(ids)] + w["wpe.weight"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        p = f"h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (t.view(T, H, D).transpose(0, 1) for t in qkv.split(C, dim=-1))  # (H, T, D)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(~causal, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(T, C)
        a = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(a, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        m = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = a + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    return x @ w["wte.weight"].T


def main():
    w = make_weights()
    prompt = torch.randint(0, V, (N_PROMPT,)).tolist()

    logits = forward(w, prompt)
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(prompt[1:]))
    assert torch.isfinite(logits).all() and torch.isfinite(loss), loss
    ids = list(prompt)
    for _ in range(N_GREEDY):
        ids.append(int(forward(w, ids)[-1].argmax()))
    greedy = ids[N_PROMPT:]

    os.makedirs(os.path.join(OUT, "prefixed"), exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    shutil.copyfile(os.path.join(OUT, "config.json"), os.path.join(OUT, "prefixed", "config.json"))
    write_safetensors(os.path.join(OUT, "model.safetensors"), w)
    prefixed = {"transformer." + k: t for k, t in w.items()}
    prefixed["lm_head.weight"] = w["wte.weight"]
    write_safetensors(os.path.join(OUT, "prefixed", "model.safetensors"), prefixed)
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump({"prompt_ids": prompt, "logits_shape": list(logits.shape),
                   "logits": logits.flatten().tolist(), "greedy_ids": greedy}, f)
        f.write("\n")

    # Read both files back: same tensors, bit for bit.
    plain = read_safetensors(os.path.join(OUT, "model.safetensors"))
    pref = read_safetensors(os.path.join(OUT, "prefixed", "model.safetensors"))
    assert list(plain) == list(w) and all(torch.equal(plain[k], w[k]) for k in w)
    assert set(pref) == {"transformer." + k for k in w} | {"lm_head.weight"}
    assert all(torch.equal(pref["transformer." + k], plain[k]) for k in w)
    assert torch.equal(pref["lm_head.weight"], plain["wte.weight"])
    assert torch.equal(forward(plain, prompt), logits)

    print(f"loss {loss.item():.6f} (ln V = {math.log(V):.6f}), logit std {logits.std().item():.4f}")
    print("prompt_ids", prompt)
    print("first logits", logits.flatten()[:3].tolist())
    print("greedy_ids", greedy)


if __name__ == "__main__":
    main()
