#!/usr/bin/env python3
"""Makes tests/data/hf-llama/: tiny Llama-family checkpoints in Hugging Face's exact layout, with golden outputs.

Plain PyTorch (no `transformers`), float64 math on the stored (rounded) weights, mirroring
transformers' LlamaForCausalLM line by line:
  - RMSNorm: x · rsqrt(mean(x²) + eps) · w                              (LlamaRMSNorm)
  - RoPE on q and k with rotate_half: the two halves of each head rotate together (apply_rotary_pos_emb);
    inv_freq = 1 / θ^(2i/d), then rope_scaling: llama3 (_compute_llama3_parameters), linear (inv_freq / factor),
    dynamic (_compute_dynamic_ntk_parameters: the base grows with the positions the call reaches)
  - GQA: each key/value head serves n_heads / n_kv_heads query heads (repeat_kv)
  - attention softmax(q kᵀ / √d + causal mask) v, then o_proj                (LlamaAttention, eager)
  - MLP down(silu(gate(x)) · up(x))                                          (LlamaMLP)
  - lm_head, tied to embed_tokens when tie_word_embeddings
Greedy continuations decode through a KV cache as `generate` does: each step's keys are rotated when they are
computed (with dynamic scaling, by the base of that step) and kept.

Qwen2ForCausalLM adds biases to q_proj, k_proj and v_proj (Qwen2Attention); Qwen3ForCausalLM normalises each
head's q and k with an RMSNorm of head_dim before RoPE (Qwen3Attention's q_norm, k_norm) and sets its own
head_dim.

Variants (each a directory with config.json, weights, golden.json):
  tied-llama3     tied embeddings, rope_scaling llama3, weights in two shards + model.safetensors.index.json, F32
  untied-linear   lm_head, rope_scaling linear (factor 2), model.safetensors in BF16
  dynamic         rope_scaling dynamic (factor 2, max_position_embeddings 16, a 20-token prompt), F16
  qwen2           Qwen2: q/k/v biases, tied embeddings, F32
  qwen3           Qwen3: q_norm/k_norm, head_dim 16 (4 heads of 16 on a width of 32), lm_head, BF16
  mistral         MistralForCausalLM: sliding_window 5 (a query at position p sees keys p − 5 < k ≤ p, as
                  masking_utils' sliding_window_overlay), a 12-token prompt, F32

    /usr/bin/python3 tools/make_llama_fixtures.py
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf-llama")
V, C, L, H, HKV, F = 64, 32, 2, 4, 2, 48
N_GREEDY = 6

BASE_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
    "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": HKV,
    "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2,
    "torch_dtype": "float32", "use_cache": True,
}
VARIANTS = {
    "tied-llama3": dict(tie=True, dtype="F32", shards=2, prompt=12, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16}),
    "untied-linear": dict(tie=False, dtype="BF16", shards=1, prompt=12, rope_scaling={"type": "linear", "factor": 2.0}),
    "dynamic": dict(tie=False, dtype="F16", shards=1, prompt=20, max_pos=16,
                    rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
    "qwen2": dict(family="qwen2", tie=True, dtype="F32", shards=1, prompt=12, rope_scaling=None),
    "qwen3": dict(family="qwen3", tie=False, dtype="BF16", shards=1, prompt=12, rope_scaling=None, head_dim=16),
    "mistral": dict(family="mistral", tie=False, dtype="F32", shards=1, prompt=12, rope_scaling=None,
                    sliding_window=5),
}
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "mistral": "MistralForCausalLM"}


def make_weights(seed, config):
    torch.manual_seed(seed)
    D, family = config["head_dim"], config["model_type"]

    def r(std, *shape, mean=0.0):
        return mean + std * torch.randn(*shape)

    w = {"model.embed_tokens.weight": r(0.5, V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = r(0.1, C, mean=1.0)
        w[p + "self_attn.q_proj.weight"] = r(0.3, H * D, C)
        w[p + "self_attn.k_proj.weight"] = r(0.3, HKV * D, C)
        w[p + "self_attn.v_proj.weight"] = r(0.3, HKV * D, C)
        if family == "qwen2":
            for n, rows in (("q", H * D), ("k", HKV * D), ("v", HKV * D)):
                w[p + f"self_attn.{n}_proj.bias"] = r(0.3, rows)
        if family == "qwen3":
            w[p + "self_attn.q_norm.weight"] = r(0.2, D, mean=1.0)
            w[p + "self_attn.k_norm.weight"] = r(0.2, D, mean=1.0)
        w[p + "self_attn.o_proj.weight"] = r(0.3, C, H * D)
        w[p + "post_attention_layernorm.weight"] = r(0.1, C, mean=1.0)
        w[p + "mlp.gate_proj.weight"] = r(0.3, F, C)
        w[p + "mlp.up_proj.weight"] = r(0.3, F, C)
        w[p + "mlp.down_proj.weight"] = r(0.3, C, F)
    w["model.norm.weight"] = r(0.1, C, mean=1.0)
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = r(0.5, V, C)
    return w


def inv_freq(config, seq_len):
    """transformers' rotary inv_freq for a call whose positions reach seq_len."""
    base, s, D = config["rope_theta"], config.get("rope_scaling"), config["head_dim"]
    kind = None if s is None else s.get("rope_type", s.get("type"))
    if kind == "dynamic":
        max_pos = config["max_position_embeddings"]
        seq_len = max(seq_len, max_pos)
        base = base * ((s["factor"] * seq_len / max_pos) - (s["factor"] - 1)) ** (D / (D - 2))
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    if kind == "linear":
        inv = inv / s["factor"]
    if kind == "llama3":
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, positions, inv):  # x (heads, T, D)
    freqs = torch.outer(positions.double(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def forward(config, w, ids, cache):
    """Logits (T, V) of ids at the positions after the cache; appends the rotated keys and values to it."""
    eps, T, D, family = config["rms_norm_eps"], len(ids), config["head_dim"], config["model_type"]
    start = cache[0][0].shape[1] if cache[0] is not None else 0
    positions = torch.arange(start, start + T)
    inv = inv_freq(config, start + T)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        if family == "qwen2":
            q, k, v = (x_ + w[p + f"self_attn.{n}_proj.bias"] for x_, n in zip((q, k, v), "qkv"))
        q, k, v = q.view(T, H, D), k.view(T, HKV, D), v.view(T, HKV, D)
        if family == "qwen3":
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        q, k = rope(q, positions, inv), rope(k, positions, inv)
        if cache[i] is not None:
            k, v = torch.cat((cache[i][0], k), dim=1), torch.cat((cache[i][1], v), dim=1)
        cache[i] = (k, v)
        k, v = k.repeat_interleave(H // HKV, dim=0), v.repeat_interleave(H // HKV, dim=0)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        mask = torch.ones(T, start + T, dtype=torch.bool).tril(diagonal=start)
        if config.get("sliding_window"):  # keys k with q − window < k ≤ q
            mask &= ~torch.ones(T, start + T, dtype=torch.bool).tril(diagonal=start - config["sliding_window"])
        s = s.masked_fill(~mask, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(T, H * D)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def reference_outputs(forward, config, w, prompt, layers, n_greedy=N_GREEDY):
    """A decoder's goldens: the logits of the whole prompt in one call, its next-token loss, and a greedy
    continuation through the KV cache. forward(config, w, ids, cache) gives the logits of ids after the cache
    (a list of one entry per layer, None when empty) and extends the cache."""
    logits = forward(config, w, prompt, [None] * layers)
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(prompt[1:]))
    cache = [None] * layers
    step = forward(config, w, prompt, cache)[-1]
    greedy = []
    for _ in range(n_greedy):
        greedy.append(int(step.argmax()))
        step = forward(config, w, [greedy[-1]], cache)[-1]
    return logits, loss, greedy


def make(name, seed, v):
    family = v.get("family", "llama")
    config = dict(BASE_CONFIG, tie_word_embeddings=v["tie"], rope_scaling=v["rope_scaling"], model_type=family,
                  architectures=[ARCHITECTURES[family]], head_dim=v.get("head_dim", C // H))
    config["max_position_embeddings"] = v.get("max_pos", config["max_position_embeddings"])
    if "sliding_window" in v:
        config["sliding_window"] = v["sliding_window"]
    config["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[v["dtype"]]
    w = {k: safetensors_py.rounded(t, v["dtype"]) for k, t in make_weights(seed, config).items()}
    prompt = torch.randint(2, V, (v["prompt"],), generator=torch.Generator().manual_seed(seed + 1)).tolist()

    logits, loss, greedy = reference_outputs(forward, config, w, prompt, L)

    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    names = list(w)
    if v["shards"] == 1:
        safetensors_py.write(os.path.join(d, "model.safetensors"), w, v["dtype"])
    else:
        per = math.ceil(len(names) / v["shards"])
        weight_map = {}
        for s in range(v["shards"]):
            file = f"model-{s + 1:05d}-of-{v['shards']:05d}.safetensors"
            part = {k: w[k] for k in names[s * per:(s + 1) * per]}
            safetensors_py.write(os.path.join(d, file), part, v["dtype"])
            weight_map.update({k: file for k in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 4 * sum(t.numel() for t in w.values())}, "weight_map": weight_map},
                      f, indent=2)
            f.write("\n")
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump({"prompt_ids": prompt, "logits_shape": list(logits.shape), "logits": logits.flatten().tolist(),
                   "loss": loss.item(), "greedy_ids": greedy}, f)
        f.write("\n")
    print(f"{name}: loss {loss.item():.6f} (ln V = {math.log(V):.4f}), logit std {logits.std().item():.3f}, "
          f"greedy {greedy}")


def main():
    for seed, (name, v) in enumerate(VARIANTS.items()):
        make(name, 10 + seed, v)


if __name__ == "__main__":
    main()
