#!/usr/bin/env python3
"""Makes tests/data/hf-gemma3/: tiny Gemma 3 text checkpoints in Hugging Face's exact layout, with golden outputs.

Plain PyTorch (no `transformers`), float64 math on the stored (rounded) weights, mirroring transformers'
Gemma3ForCausalLM (model_type gemma3_text) line by line:
  - embeddings scaled by √hidden_size, the scale a float32 tensor (Gemma3TextScaledWordEmbedding)
  - RMSNorm x · rsqrt(mean(x²) + eps) · (1 + w): gains stored as offsets from 1 (Gemma3RMSNorm)
  - four norms a layer: input_layernorm, then attention, post_attention_layernorm on its output before the
    residual add; pre_feedforward_layernorm, the MLP, post_feedforward_layernorm, the add (Gemma3DecoderLayer)
  - attention: q_proj, k_proj, v_proj, then q_norm and k_norm (Gemma3RMSNorm over head_dim) per head, RoPE with
    rotate_half, GQA (repeat_kv), scores · query_pre_attn_scalar^-0.5, softmax, o_proj (Gemma3Attention, eager)
  - layer types: layer i is "sliding_attention" when (i + 1) % sliding_window_pattern != 0, else "full_attention",
    or as config.layer_types lists them; a sliding layer's query at position p sees keys k with p − window < k ≤ p
    (masking_utils' sliding_window_overlay) and rotates with rope_local_base_freq and no scaling; full layers use
    rope_theta with rope_scaling (linear here)
  - MLP down(gelu_tanh(gate(x)) · up(x)) (Gemma3MLP, hidden_activation gelu_pytorch_tanh)
  - the final norm, and the LM head tied to the embeddings
Greedy continuations decode through a KV cache as `generate` does (a sliding layer's cache keeps every position;
the mask hides the old ones, as HF's hybrid cache does by keeping only the window).

Variants (each a directory with config.json, model.safetensors, golden.json):
  pattern    sliding_window_pattern 3 (layers 0, 1, 3 local, 2 global), sliding_window 4, a 14-token prompt, F32
  layer-types   config.layer_types spelled out, rope_scaling linear (factor 8) on the global layers, BF16

    /usr/bin/python3 tools/make_gemma_fixtures.py
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402
from make_llama_fixtures import reference_outputs, rope  # noqa: E402  (shared with the Llama fixtures)

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf-gemma3")
V, C, L, H, HKV, D, F = 64, 32, 4, 4, 2, 16, 48
N_GREEDY = 6

BASE_CONFIG = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": V, "hidden_size": C,
    "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": HKV,
    "head_dim": D, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 64, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None, "query_pre_attn_scalar": 24,
    "sliding_window": 4, "sliding_window_pattern": 3, "final_logit_softcapping": None,
    "attn_logit_softcapping": None, "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
    "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "float32",
    "use_cache": True, "cache_implementation": "hybrid",
}
VARIANTS = {
    "pattern": dict(seed=30, dtype="F32", prompt=14),
    "layer-types": dict(seed=32, dtype="BF16", prompt=12, rope_scaling={"rope_type": "linear", "factor": 8.0},
                        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"]),
}


def layer_types(config):
    if config.get("layer_types"):
        return config["layer_types"]
    k = config["sliding_window_pattern"]
    return ["sliding_attention" if (i + 1) % k else "full_attention" for i in range(L)]


def make_weights(seed):
    torch.manual_seed(seed)

    def r(std, *shape):
        return std * torch.randn(*shape)

    w = {"model.embed_tokens.weight": r(0.2, V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = r(0.2, C)
        w[p + "self_attn.q_proj.weight"] = r(0.3, H * D, C)
        w[p + "self_attn.k_proj.weight"] = r(0.3, HKV * D, C)
        w[p + "self_attn.v_proj.weight"] = r(0.3, HKV * D, C)
        w[p + "self_attn.o_proj.weight"] = r(0.3, C, H * D)
        w[p + "self_attn.q_norm.weight"] = r(0.2, D)
        w[p + "self_attn.k_norm.weight"] = r(0.2, D)
        w[p + "post_attention_layernorm.weight"] = r(0.2, C)
        w[p + "pre_feedforward_layernorm.weight"] = r(0.2, C)
        w[p + "mlp.gate_proj.weight"] = r(0.3, F, C)
        w[p + "mlp.up_proj.weight"] = r(0.3, F, C)
        w[p + "mlp.down_proj.weight"] = r(0.3, C, F)
        w[p + "post_feedforward_layernorm.weight"] = r(0.2, C)
    w["model.norm.weight"] = r(0.2, C)
    return w


def inv_freq(base, scaling):
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    if scaling is not None:  # linear: positions divided by the factor
        inv = inv / scaling["factor"]
    return inv


def gemma_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(config, w, ids, cache):
    """Logits (T, V) of ids at the positions after the cache; appends the rotated keys and values to it."""
    eps, T = config["rms_norm_eps"], len(ids)
    start = cache[0][0].shape[1] if cache[0] is not None else 0
    positions = torch.arange(start, start + T)
    types = layer_types(config)
    scale = float(torch.tensor(C ** 0.5, dtype=torch.float32))
    x = w["model.embed_tokens.weight"][torch.tensor(ids)] * scale
    for i in range(L):
        p = f"model.layers.{i}."
        sliding = types[i] == "sliding_attention"
        inv = inv_freq(config["rope_local_base_freq"], None) if sliding else inv_freq(config["rope_theta"],
                                                                                       config["rope_scaling"])
        h = gemma_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        q, k, v = q.view(T, H, D), k.view(T, HKV, D), v.view(T, HKV, D)
        q = gemma_norm(q, w[p + "self_attn.q_norm.weight"], eps)
        k = gemma_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        q, k = rope(q, positions, inv), rope(k, positions, inv)
        if cache[i] is not None:
            k, v = torch.cat((cache[i][0], k), dim=1), torch.cat((cache[i][1], v), dim=1)
        cache[i] = (k, v)
        k, v = k.repeat_interleave(H // HKV, dim=0), v.repeat_interleave(H // HKV, dim=0)
        s = (q @ k.transpose(-1, -2)) * config["query_pre_attn_scalar"] ** -0.5
        q_pos, k_pos = positions[:, None], torch.arange(start + T)[None, :]
        mask = k_pos <= q_pos
        if sliding:
            mask = mask & (k_pos > q_pos - config["sliding_window"])
        s = s.masked_fill(~mask, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(T, H * D)
        o = o @ w[p + "self_attn.o_proj.weight"].T
        x = x + gemma_norm(o, w[p + "post_attention_layernorm.weight"], eps)
        h = gemma_norm(x, w[p + "pre_feedforward_layernorm.weight"], eps)
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        m = (gelu_tanh(g) * u) @ w[p + "mlp.down_proj.weight"].T
        x = x + gemma_norm(m, w[p + "post_feedforward_layernorm.weight"], eps)
    x = gemma_norm(x, w["model.norm.weight"], eps)
    return x @ w["model.embed_tokens.weight"].T


def make(name, seed, v):
    config = dict(BASE_CONFIG, rope_scaling=v.get("rope_scaling"))
    if "layer_types" in v:
        config["layer_types"] = v["layer_types"]
        del config["sliding_window_pattern"]
    config["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[v["dtype"]]
    w = {k: safetensors_py.rounded(t, v["dtype"]) for k, t in make_weights(seed).items()}
    prompt = torch.randint(3, V, (v["prompt"],), generator=torch.Generator().manual_seed(seed + 1)).tolist()

    logits, loss, greedy = reference_outputs(forward, config, w, prompt, L)

    safetensors_py.write_checkpoint(os.path.join(OUT, name), config, w, v["dtype"], {
        "prompt_ids": prompt, "logits_shape": list(logits.shape), "logits": logits.flatten().tolist(),
        "loss": loss.item(), "greedy_ids": greedy})
    print(f"{name}: loss {loss.item():.6f} (ln V = {math.log(V):.4f}), logit std {logits.std().item():.3f}, "
          f"greedy {greedy}")


def main():
    for name, v in VARIANTS.items():
        make(name, v["seed"], v)


if __name__ == "__main__":
    main()
