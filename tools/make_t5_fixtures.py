#!/usr/bin/env python3
"""Makes tests/data/hf-t5/: tiny T5ForConditionalGeneration checkpoints in Hugging Face's exact layout, with goldens.

Plain PyTorch (no `transformers`), float64 math on the stored (rounded) weights, mirroring transformers' T5 line by
line:
  - one embedding `shared` for the encoder and the decoder (encoder.embed_tokens and decoder.embed_tokens are the
    same tensor), unscaled
  - T5LayerNorm: x · rsqrt(mean(x²) + eps) · w (no mean, no bias), before each sub-layer, and final_layer_norm
    after each stack
  - T5Attention: q, k, v, o without biases, scores q·kᵀ with no 1/√d scaling, plus the relative position bias of
    block 0 (relative_attention_bias, an Embedding(num_buckets, n_heads)) added in every block of its stack
    (position_bias is computed once and passed on); buckets by _relative_position_bucket, bidirectional in the
    encoder, the past only in the decoder, the log computed in float32 as torch does; cross-attention has no bias
  - T5DenseActDense (feed_forward_proj "relu": wo(relu(wi(x)))) or T5DenseGatedActDense ("gated-gelu":
    wo(gelu_new(wi_0(x)) · wi_1(x)))
  - the LM head: with tie_word_embeddings the decoder output is scaled by d_model^-0.5 and multiplied by `shared`;
    without it, lm_head.weight
  - labels → decoder_input_ids by shift_right with decoder_start_token_id (0, the pad token)
Greedy continuations start from decoder_start_token_id and decode through a KV cache (the cached step's bias is
the row of its position).

Variants (each a directory with config.json, model.safetensors, golden.json):
  v1_0      T5 v1.0: relu, tied embeddings (the d_model^-0.5 scale), 2 + 2 layers, d_kv = d_model / heads, F32
  v1_1      T5 v1.1 / Flan-T5: gated-gelu, lm_head, 2 encoder + 3 decoder layers, d_kv 16 on a width of 32, BF16

    /usr/bin/python3 tools/make_t5_fixtures.py
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf-t5")
V, C, H, F = 64, 32, 4, 48
BUCKETS, MAX_DISTANCE = 8, 20
N_GREEDY = 6

BASE_CONFIG = {
    "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "vocab_size": V, "d_model": C,
    "num_heads": H, "d_ff": F, "relative_attention_num_buckets": BUCKETS,
    "relative_attention_max_distance": MAX_DISTANCE, "dropout_rate": 0.1, "layer_norm_epsilon": 1e-06,
    "initializer_factor": 1.0, "is_encoder_decoder": True, "use_cache": True, "pad_token_id": 0,
    "eos_token_id": 1, "decoder_start_token_id": 0, "torch_dtype": "float32",
}
VARIANTS = {
    "v1_0": dict(seed=55, dtype="F32", layers=2, decoder_layers=2, d_kv=C // H, ff="relu", tie=True),
    "v1_1": dict(seed=51, dtype="BF16", layers=2, decoder_layers=3, d_kv=16, ff="gated-gelu", tie=False),
}


def make_weights(seed, v):
    torch.manual_seed(seed)

    def r(std, *shape, mean=0.0):
        return mean + std * torch.randn(*shape)

    inner = H * v["d_kv"]
    w = {"shared.weight": r(1.0, V, C)}

    def attention(p, bias):
        # Unscaled scores: q and k kept small (as T5 initialises them, σ = (d_model·d_kv)^-1/2 for q), or the
        # softmax turns so sharp that float32 itself is off by 1e-4 and no engine can be held to the reference.
        for n, std in (("q", 0.08), ("k", 0.15), ("v", 0.3)):
            w[p + f"{n}.weight"] = r(std, inner, C)
        w[p + "o.weight"] = r(0.3, C, inner)
        if bias:
            w[p + "relative_attention_bias.weight"] = r(0.5, BUCKETS, H)

    def ffn(p):
        if v["ff"] == "relu":
            w[p + "DenseReluDense.wi.weight"] = r(0.3, F, C)
        else:
            w[p + "DenseReluDense.wi_0.weight"] = r(0.3, F, C)
            w[p + "DenseReluDense.wi_1.weight"] = r(0.3, F, C)
        w[p + "DenseReluDense.wo.weight"] = r(0.3, C, F)

    for i in range(v["layers"]):
        p = f"encoder.block.{i}.layer."
        attention(p + "0.SelfAttention.", i == 0)
        w[p + "0.layer_norm.weight"] = r(0.1, C, mean=1.0)
        ffn(p + "1.")
        w[p + "1.layer_norm.weight"] = r(0.1, C, mean=1.0)
    w["encoder.final_layer_norm.weight"] = r(0.1, C, mean=1.0)
    for i in range(v["decoder_layers"]):
        p = f"decoder.block.{i}.layer."
        attention(p + "0.SelfAttention.", i == 0)
        w[p + "0.layer_norm.weight"] = r(0.1, C, mean=1.0)
        attention(p + "1.EncDecAttention.", False)
        w[p + "1.layer_norm.weight"] = r(0.1, C, mean=1.0)
        ffn(p + "2.")
        w[p + "2.layer_norm.weight"] = r(0.1, C, mean=1.0)
    w["decoder.final_layer_norm.weight"] = r(0.1, C, mean=1.0)
    if not v["tie"]:
        w["lm_head.weight"] = r(0.5, V, C)
    return w


def relative_position_bucket(relative_position, bidirectional):
    """transformers' T5Attention._relative_position_bucket (its log in float32)."""
    num_buckets, buckets = BUCKETS, torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (torch.log(relative_position.float() / max_exact) / math.log(MAX_DISTANCE / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, relative_position, large)


def position_bias(table, q_positions, k_length, bidirectional):
    relative = torch.arange(k_length)[None, :] - q_positions[:, None]
    return table[relative_position_bucket(relative, bidirectional)].permute(2, 0, 1)  # (H, Tq, Tk)


def t5_norm(x, w, eps):
    return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attend(w, p, x, kv, bias, d_kv, causal_start=None):
    """One T5Attention: queries from x (Tq, C), keys and values from kv (Tk, C); returns (Tq, C)."""
    Tq, Tk = x.shape[0], kv.shape[0]
    q = (x @ w[p + "q.weight"].T).view(Tq, H, d_kv).transpose(0, 1)
    k = (kv @ w[p + "k.weight"].T).view(Tk, H, d_kv).transpose(0, 1)
    v = (kv @ w[p + "v.weight"].T).view(Tk, H, d_kv).transpose(0, 1)
    s = q @ k.transpose(-1, -2)
    if bias is not None:
        s = s + bias
    if causal_start is not None:
        mask = torch.ones(Tq, Tk, dtype=torch.bool).tril(diagonal=causal_start)
        s = s.masked_fill(~mask, float("-inf"))
    o = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(Tq, H * d_kv)
    return o @ w[p + "o.weight"].T


def ffn(w, p, x, kind):
    if kind == "relu":
        return torch.relu(x @ w[p + "DenseReluDense.wi.weight"].T) @ w[p + "DenseReluDense.wo.weight"].T
    g, u = x @ w[p + "DenseReluDense.wi_0.weight"].T, x @ w[p + "DenseReluDense.wi_1.weight"].T
    return (gelu_new(g) * u) @ w[p + "DenseReluDense.wo.weight"].T


def encode(config, v, w, src):
    eps = config["layer_norm_epsilon"]
    x = w["shared.weight"][torch.tensor(src)]
    bias = position_bias(w["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                         torch.arange(len(src)), len(src), True)
    for i in range(v["layers"]):
        p = f"encoder.block.{i}.layer."
        h = t5_norm(x, w[p + "0.layer_norm.weight"], eps)
        x = x + attend(w, p + "0.SelfAttention.", h, h, bias, v["d_kv"])
        x = x + ffn(w, p + "1.", t5_norm(x, w[p + "1.layer_norm.weight"], eps), v["ff"])
    return t5_norm(x, w["encoder.final_layer_norm.weight"], eps)


def decode(config, v, w, enc, ids, cache):
    """Logits (T, V) of decoder ids after the cached ones; cache holds each block's normed self-attention inputs."""
    eps, T = config["layer_norm_epsilon"], len(ids)
    start = cache[0].shape[0] if cache[0] is not None else 0
    x = w["shared.weight"][torch.tensor(ids)]
    bias = position_bias(w["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                         torch.arange(start, start + T), start + T, False)
    for i in range(v["decoder_layers"]):
        p = f"decoder.block.{i}.layer."
        h = t5_norm(x, w[p + "0.layer_norm.weight"], eps)
        cache[i] = h if cache[i] is None else torch.cat((cache[i], h))
        x = x + attend(w, p + "0.SelfAttention.", h, cache[i], bias, v["d_kv"], causal_start=start)
        x = x + attend(w, p + "1.EncDecAttention.", t5_norm(x, w[p + "1.layer_norm.weight"], eps), enc, None,
                       v["d_kv"])
        x = x + ffn(w, p + "2.", t5_norm(x, w[p + "2.layer_norm.weight"], eps), v["ff"])
    x = t5_norm(x, w["decoder.final_layer_norm.weight"], eps)
    if v["tie"]:
        return (x * C ** -0.5) @ w["shared.weight"].T
    return x @ w["lm_head.weight"].T


def make(name, v):
    config = dict(BASE_CONFIG, num_layers=v["layers"], num_decoder_layers=v["decoder_layers"], d_kv=v["d_kv"],
                  feed_forward_proj=v["ff"], tie_word_embeddings=v["tie"])
    config["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16"}[v["dtype"]]
    w = {k: safetensors_py.rounded(t, v["dtype"]) for k, t in make_weights(v["seed"], v).items()}
    g = torch.Generator().manual_seed(v["seed"] + 1)
    src = torch.randint(2, V, (11,), generator=g).tolist() + [1]  # ends with EOS, as a tokenizer's text does
    labels = torch.randint(2, V, (9,), generator=g).tolist() + [1]
    decoder_ids = [config["decoder_start_token_id"]] + labels[:-1]  # shift_right

    enc = encode(config, v, w, src)
    logits = decode(config, v, w, enc, decoder_ids, [None] * v["decoder_layers"])
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels))
    cache = [None] * v["decoder_layers"]
    step = decode(config, v, w, enc, [config["decoder_start_token_id"]], cache)[-1]
    greedy = []
    for _ in range(N_GREEDY):
        greedy.append(int(step.argmax()))
        step = decode(config, v, w, enc, [greedy[-1]], cache)[-1]

    tensors = dict(w)
    if v["tie"]:  # as save_pretrained writes a tied T5: the stacks' embed_tokens beside shared
        tensors["encoder.embed_tokens.weight"] = w["shared.weight"]
        tensors["decoder.embed_tokens.weight"] = w["shared.weight"]
    safetensors_py.write_checkpoint(os.path.join(OUT, name), config, tensors, v["dtype"], {"src_ids": src, "decoder_ids": decoder_ids, "labels": labels, "logits_shape": list(logits.shape),
                   "logits": logits.flatten().tolist(), "loss": loss.item(), "greedy_ids": greedy})
    print(f"{name}: loss {loss.item():.6f} (ln V = {math.log(V):.4f}), logit std {logits.std().item():.3f}, "
          f"greedy {greedy}")


def main():
    for name, v in VARIANTS.items():
        make(name, v)


if __name__ == "__main__":
    main()
