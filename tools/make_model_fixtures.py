#!/usr/bin/env python3
"""Makes tests/data/models/<name>/: whole tiny transformers, computed by PyTorch, as golden fixtures.

Uses Debian's python3-torch (1.13), in float64 (the weights are rounded to float32 first, so Attend, which
loads fp32 weights, computes the same function). One model class implements docs/FORMATS.md, "The model
directory", for all three architectures. Six models:
  gpt           decoder, learned positions, LayerNorm, pre-LN, gelu_tanh, biases, tied       case lm (ls 0.1)
  llama         decoder, GQA, RoPE, RMSNorm, SwiGLU (default d_ff), no biases, untied        case lm
  bert          encoder, learned positions, LayerNorm, post-LN, gelu, MLM + cls pooling      cases mlm, cls
  t5            encoder-decoder, T5 relative bias, RMSNorm, relu, scale 1, untied             case seq2seq (ls 0.1)
  moe           decoder, ALiBi, residual scale, scaled embeddings, 4 experts top-2, capacity 1  case lm
  encoder_mean  encoder, MQA, sinusoidal positions, RMSNorm, relu, mean pooling               case cls
Each directory holds config.json (every key), model.safetensors (F32), golden.json (batches, logits, losses)
and grads_<case>.safetensors (F32: d total loss / d each parameter, named as the weights).

    /usr/bin/python3 tools/make_model_fixtures.py
"""
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

DEFAULTS = {
    "architecture": "decoder", "vocab_size": 256, "d_model": 512, "n_layers": 6, "n_decoder_layers": 0,
    "n_heads": 8, "n_kv_heads": 0, "d_ff": 0, "ffn_multiple_of": 32, "activation": "gelu", "max_seq_len": 1024,
    "position": "learned", "rope_base": 10000.0, "rope_base_scale": 1.0, "rope_ntk_factor": 1.0,
    "rope_position_scale": 1.0, "t5_num_buckets": 32, "t5_max_distance": 128, "norm": "layernorm",
    "norm_eps": 1e-5, "norm_placement": "pre", "residual_scale": 1.0, "bias": True, "attention_scale": 0.0,
    "attention_kernel": "flash", "scale_embeddings": False, "tie_embeddings": True, "embedding_dropout": 0.0,
    "attention_dropout": 0.0, "residual_dropout": 0.0, "ffn_dropout": 0.0, "n_experts": 0, "moe_top_k": 2,
    "moe_capacity_factor": 1.25, "moe_aux_loss_weight": 0.01, "moe_normalize_weights": True, "moe_every": 1,
    "pooling": "cls", "n_classes": 0, "init": "gpt2", "init_std": 0.02, "init_qk_scale": 1.0, "seed": 0,
}
TINY = {"vocab_size": 37, "d_model": 16, "max_seq_len": 16}
MODELS = {
    "gpt": dict(architecture="decoder", n_layers=2, n_heads=4, position="learned", norm="layernorm",
                norm_placement="pre", activation="gelu_tanh", bias=True, tie_embeddings=True),
    "llama": dict(architecture="decoder", n_layers=2, n_heads=4, n_kv_heads=2, position="rope", norm="rmsnorm",
                  norm_eps=1e-6, activation="swiglu", ffn_multiple_of=8, bias=False, tie_embeddings=False),
    "bert": dict(architecture="encoder", n_layers=2, n_heads=2, position="learned", norm="layernorm",
                 norm_placement="post", activation="gelu", bias=True, tie_embeddings=True, n_classes=3, pooling="cls"),
    "t5": dict(architecture="encoder-decoder", n_layers=2, n_decoder_layers=2, n_heads=4, position="t5",
               t5_num_buckets=8, t5_max_distance=16, norm="rmsnorm", activation="relu", bias=False,
               tie_embeddings=False, attention_scale=1.0),
    "moe": dict(architecture="decoder", n_layers=2, n_heads=2, position="alibi", norm="layernorm", activation="gelu",
                residual_scale=0.7, scale_embeddings=True, n_experts=4, moe_top_k=2, moe_capacity_factor=1.0,
                moe_aux_loss_weight=0.05, moe_every=1, d_ff=24, bias=True, tie_embeddings=True),
    "encoder_mean": dict(architecture="encoder", n_layers=1, n_heads=4, n_kv_heads=1, position="sinusoidal",
                         norm="rmsnorm", activation="relu", bias=True, tie_embeddings=True, n_classes=2, pooling="mean"),
}
# (case, label smoothing, classification labels) per model; the batch shapes: T and lengths (of the decoder for
# encoder-decoder, with the source's src_T and src_lengths).
CASES = {"gpt": [("lm", 0.1, [])], "llama": [("lm", 0.0, [])], "bert": [("mlm", 0.0, []), ("cls", 0.0, [2, 0])],
         "t5": [("seq2seq", 0.1, [])], "moe": [("lm", 0.0, [])], "encoder_mean": [("cls", 0.0, [1, 0])]}
SHAPES = {"t5": {"T": 5, "lengths": [5, 3], "src_T": 6, "src_lengths": [6, 3]}}
DEFAULT_SHAPE = {"T": 7, "lengths": [7, 4]}


def d_ff(cfg):
    if cfg["d_ff"] > 0:
        return cfg["d_ff"]
    if cfg["activation"] == "swiglu":
        m = cfg["ffn_multiple_of"]
        return math.ceil(8 / 3 * cfg["d_model"] / m) * m
    return 4 * cfg["d_model"]


def param_specs(cfg):
    """(name, shape, kind) for every tensor of the model, in docs/FORMATS.md's order."""
    C, V, H = cfg["d_model"], cfg["vocab_size"], cfg["n_heads"]
    Hkv, D, Fh = cfg["n_kv_heads"] or H, C // H, d_ff(cfg)
    specs = []

    def lin(name, out, inp, bias=cfg["bias"]):
        specs.append((name + ".weight", (out, inp), "matrix"))
        if bias:
            specs.append((name + ".bias", (out,), "bias"))

    def norm(name):
        specs.append((name + ".weight", (C,), "norm_weight"))
        if cfg["norm"] == "layernorm":
            specs.append((name + ".bias", (C,), "norm_bias"))

    def ffn(p):
        lin(p + "up", Fh, C)
        if cfg["activation"] == "swiglu":
            lin(p + "gate", Fh, C)
        lin(p + "down", C, Fh)

    specs.append(("embed.tokens.weight", (V, C), "embedding"))
    if cfg["position"] == "learned":
        specs.append(("embed.positions.weight", (cfg["max_seq_len"], C), "embedding"))
    for s, n, cross in stacks(cfg):
        for i in range(n):
            p = f"{s}.layers.{i}."
            norm(p + "attn_norm")
            lin(p + "attn.qkv", (H + 2 * Hkv) * D, C)
            lin(p + "attn.o", C, H * D)
            if cfg["position"] == "t5":
                specs.append((p + "attn.relative_attention_bias", (cfg["t5_num_buckets"], H), "t5"))
            if cross:
                norm(p + "cross_norm")
                lin(p + "cross_attn.q", H * D, C)
                lin(p + "cross_attn.kv", 2 * Hkv * D, C)
                lin(p + "cross_attn.o", C, H * D)
            norm(p + "ffn_norm")
            if is_moe(cfg, i):
                specs.append((p + "ffn.router.weight", (cfg["n_experts"], C), "router"))
                for e in range(cfg["n_experts"]):
                    ffn(p + f"ffn.experts.{e}.")
            else:
                ffn(p + "ffn.")
        if cfg["norm_placement"] == "pre":
            norm(s + ".norm")
    if not cfg["tie_embeddings"]:  # the LM head, or the encoder's MLM output matrix
        specs.append(("lm_head.weight", (V, C), "matrix"))
    if cfg["architecture"] == "encoder":
        lin("mlm.dense", C, C, bias=True)
        norm("mlm.norm")
        specs.append(("mlm.bias", (V,), "bias"))
        if cfg["n_classes"] > 0:
            lin("classifier", cfg["n_classes"], C, bias=True)
    return specs


def stacks(cfg):
    """(name, blocks, has cross-attention) for each stack."""
    arch = cfg["architecture"]
    if arch == "encoder-decoder":
        return [("encoder", cfg["n_layers"], False), ("decoder", cfg["n_decoder_layers"] or cfg["n_layers"], True)]
    return [("decoder" if arch == "decoder" else "encoder", cfg["n_layers"], False)]


def is_moe(cfg, i):
    return cfg["n_experts"] > 0 and (i + 1) % cfg["moe_every"] == 0


def init_param(shape, kind):
    if kind == "matrix":
        t = torch.randn(shape) * (0.8 / math.sqrt(shape[1]))
    else:
        std = {"bias": 0.1, "norm_bias": 0.1, "norm_weight": 0.1, "t5": 0.5, "embedding": 0.5, "router": 0.5}[kind]
        t = torch.randn(shape) * std + (1.0 if kind == "norm_weight" else 0.0)
    return t.float().double().requires_grad_()  # rounded to float32: the weights Attend loads


def alibi_slopes(H):
    """As src/kernels/position.cpp: the power-of-two rule for the largest n0 <= H, then every other one of 2·n0."""
    n0 = 1
    while n0 * 2 <= H:
        n0 *= 2
    s = [2.0 ** (-8.0 * (h + 1) / n0) for h in range(n0)]
    return torch.tensor(s + [2.0 ** (-8.0 * (2 * (h - n0) + 1) / (2 * n0)) for h in range(n0, H)])


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """T5's bucket of rel = key - query, with float32 logarithms as the reference (and Attend) compute it."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        bucket = num_buckets if rel > 0 else 0
        n = abs(rel)
    else:
        n = max(-rel, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    f32 = lambda v: torch.tensor(v, dtype=torch.float32)
    scaled = (torch.log(f32(n) / f32(max_exact)) / f32(math.log(max_distance / max_exact))
              * f32(num_buckets - max_exact))
    return bucket + min(max_exact + int(scaled.item()), num_buckets - 1)


def attend(q, k, v, scale, bias, mask):
    """q (B, Tq, H, D), k/v (B, Tk, Hkv, D); query head h uses kv head h // (H/Hkv); mask True = may attend."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1), v)


class Model:
    def __init__(self, cfg):
        self.cfg = cfg
        torch.manual_seed(cfg["seed"])
        self.specs = param_specs(cfg)
        self.P = {name: init_param(shape, kind) for name, shape, kind in self.specs}
        self.C, self.H = cfg["d_model"], cfg["n_heads"]
        self.Hkv, self.D = cfg["n_kv_heads"] or self.H, self.C // self.H
        self.refused = 0  # MoE choices refused for capacity, in the last forward
        self.min_gap = float("inf")  # the smallest p gap between a token's k-th and (k+1)-th expert

    def linear(self, name, x):
        y = x @ self.P[name + ".weight"].T
        return y + self.P[name + ".bias"] if name + ".bias" in self.P else y

    def norm(self, name, x):
        w, eps = self.P[name + ".weight"], self.cfg["norm_eps"]
        if self.cfg["norm"] == "layernorm":
            return F.layer_norm(x, (self.C,), w, self.P[name + ".bias"], eps)  # biased variance
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def act(self, x):
        a = self.cfg["activation"]
        return {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[a](x)

    def embed(self, ids):
        cfg, T = self.cfg, ids.shape[1]
        x = self.P["embed.tokens.weight"][ids] * (math.sqrt(self.C) if cfg["scale_embeddings"] else 1.0)
        if cfg["position"] == "learned":
            x = x + self.P["embed.positions.weight"][:T]
        elif cfg["position"] == "sinusoidal":
            pos, two_i = torch.arange(T)[:, None].double(), (torch.arange(self.C) // 2 * 2).double()
            ang = pos / 10000.0 ** (two_i / self.C)
            x = x + torch.where(torch.arange(self.C) % 2 == 0, torch.sin(ang), torch.cos(ang))
        return x

    def rope(self, x):
        """x (B, T, heads, D): rotate pairs (2i, 2i+1) by pos·θ_i, as src/kernels/position.cpp."""
        cfg, D, T = self.cfg, self.D, x.shape[1]
        base = cfg["rope_base"] * cfg["rope_base_scale"]
        if cfg["rope_ntk_factor"] != 1.0:
            base *= cfg["rope_ntk_factor"] ** (D / (D - 2.0))
        theta = base ** (-2.0 * torch.arange(D // 2).double() / D)
        ang = (torch.arange(T).double() * cfg["rope_position_scale"])[:, None] * theta[None, :]
        cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
        e, o = x[..., 0::2], x[..., 1::2]
        return torch.stack([e * cos - o * sin, e * sin + o * cos], dim=-1).reshape(x.shape)

    def output_matrix(self):
        return self.P["embed.tokens.weight" if self.cfg["tie_embeddings"] else "lm_head.weight"]

    def scale(self):
        return self.cfg["attention_scale"] if self.cfg["attention_scale"] > 0 else 1.0 / math.sqrt(self.D)

    def self_attn(self, p, x, lengths, causal):
        cfg, (B, T, _), H, Hkv, D = self.cfg, x.shape, self.H, self.Hkv, self.D
        proj = self.linear(p + "qkv", x)
        q = proj[..., :H * D].reshape(B, T, H, D)
        k = proj[..., H * D:(H + Hkv) * D].reshape(B, T, Hkv, D)
        v = proj[..., (H + Hkv) * D:].reshape(B, T, Hkv, D)
        if cfg["position"] == "rope":
            q, k = self.rope(q), self.rope(k)
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        bias = None
        if cfg["position"] == "alibi":
            bias = (-alibi_slopes(H)[:, None, None] * (i - j).abs()[None])[None]
        elif cfg["position"] == "t5":
            buckets = torch.tensor([[t5_bucket(b - a, not causal, cfg["t5_num_buckets"], cfg["t5_max_distance"])
                                     for b in range(T)] for a in range(T)])
            bias = self.P[p + "relative_attention_bias"][buckets].permute(2, 0, 1)[None]  # (1, H, T, T)
        mask = (j[None] < lengths[:, None, None])[:, None]  # (B, 1, 1, T)
        if causal:
            mask = mask & (j <= i)[None, None]
        out = attend(q, k, v, self.scale(), bias, mask).reshape(B, T, H * D)
        return self.linear(p + "o", out)

    def cross_attn(self, p, x, enc, src_lengths):
        (B, T, _), Tk, H, Hkv, D = x.shape, enc.shape[1], self.H, self.Hkv, self.D
        q = self.linear(p + "q", x).reshape(B, T, H, D)
        kv = self.linear(p + "kv", enc)
        k, v = kv[..., :Hkv * D].reshape(B, Tk, Hkv, D), kv[..., Hkv * D:].reshape(B, Tk, Hkv, D)
        mask = (torch.arange(Tk)[None, :] < src_lengths[:, None])[:, None, None, :]
        return self.linear(p + "o", attend(q, k, v, self.scale(), None, mask).reshape(B, T, H * D))

    def ffn(self, p, x):
        h = self.linear(p + "up", x)
        h = F.silu(self.linear(p + "gate", x)) * h if self.cfg["activation"] == "swiglu" else self.act(h)
        return self.linear(p + "down", h)

    def moe(self, p, x, lengths):
        """Returns (output, aux); the router sees only the real tokens, in (b, t) order."""
        cfg, (B, T, C) = self.cfg, x.shape
        E, k = cfg["n_experts"], cfg["moe_top_k"]
        real = (torch.arange(T)[None, :] < lengths[:, None]).reshape(-1).nonzero().reshape(-1)
        rows = x.reshape(B * T, C)[real]
        N = rows.shape[0]
        probs = torch.softmax(rows @ self.P[p + "router.weight"].T, dim=-1)  # (N, E)
        ranked = torch.sort(probs.detach(), dim=-1, descending=True, stable=True)  # lower index wins a tie
        choice = ranked.indices[:, :k]
        if k < E:
            self.min_gap = min(self.min_gap, (ranked.values[:, k - 1] - ranked.values[:, k]).min().item())
        w = probs.gather(1, choice)
        if cfg["moe_normalize_weights"]:
            w = w / w.sum(-1, keepdim=True)
        f = cfg["moe_capacity_factor"]
        cap = math.ceil(f * N * k / E) if f > 0 else N * k
        accepted, load = torch.zeros(N, k, dtype=torch.bool), [0] * E
        for r in range(k):  # rank by rank, tokens in order within a rank
            for n in range(N):
                e = int(choice[n, r])
                if load[e] < cap:
                    load[e] += 1
                    accepted[n, r] = True
        self.refused += int((~accepted).sum())
        y = torch.zeros(N, C)
        for e in range(E):
            gate = (w * (accepted & (choice == e))).sum(-1)  # (N,): 0 where e was not (or not accepted) chosen
            y = y + gate[:, None] * self.ffn(p + f"experts.{e}.", rows)
        frac = torch.bincount(choice.reshape(-1), minlength=E).double() / (N * k)  # before capacity, a constant
        aux = E * (frac * probs.mean(0)).sum()
        return torch.zeros(B * T, C).index_copy(0, real, y).reshape(B, T, C), aux

    def stack(self, s, n, x, lengths, causal, enc=None, src_lengths=None):
        cfg, a, pre, auxes = self.cfg, self.cfg["residual_scale"], self.cfg["norm_placement"] == "pre", []
        for i in range(n):
            p = f"{s}.layers.{i}."

            def sub(x, norm, fn):
                return x + a * fn(self.norm(p + norm, x)) if pre else self.norm(p + norm, x + a * fn(x))

            def ffn(h):
                if not is_moe(cfg, i):
                    return self.ffn(p + "ffn.", h)
                out, aux = self.moe(p + "ffn.", h, lengths)
                auxes.append(aux)
                return out

            x = sub(x, "attn_norm", lambda h: self.self_attn(p + "attn.", h, lengths, causal))
            if enc is not None:
                x = sub(x, "cross_norm", lambda h: self.cross_attn(p + "cross_attn.", h, enc, src_lengths))
            x = sub(x, "ffn_norm", ffn)
        return (self.norm(s + ".norm", x) if pre else x), sum(auxes, torch.zeros(()))

    def forward(self, batch, ls):
        """Returns (logits, ce, aux, final hidden state, embedding outputs); batch holds tensors."""
        cfg, arch = self.cfg, self.cfg["architecture"]
        self.refused, self.min_gap, embeds, aux = 0, float("inf"), [], torch.zeros(())
        all_stacks, cross = stacks(cfg), {}
        if arch == "encoder-decoder":  # the encoder's final output feeds every decoder block's cross-attention
            embeds.append(self.embed(batch["src_ids"]))
            enc, aux = self.stack(*all_stacks[0][:2], embeds[-1], batch["src_lengths"], False)
            cross = dict(enc=enc, src_lengths=batch["src_lengths"])
        embeds.append(self.embed(batch["ids"]))
        x, aux2 = self.stack(*all_stacks[-1][:2], embeds[-1], batch["lengths"], arch != "encoder", **cross)
        aux = aux + aux2
        V, targets = cfg["vocab_size"], batch["targets"]
        if arch != "encoder":
            logits = x @ self.output_matrix().T
            ce = cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ls)
        elif len(batch["labels"]) > 0:
            lengths = batch["lengths"]
            if cfg["pooling"] == "cls":
                pooled = x[:, 0]
            else:
                real = (torch.arange(x.shape[1])[None, :] < lengths[:, None]).double()
                pooled = (x * real[..., None]).sum(1) / lengths[:, None].double()
            logits = self.linear("classifier", pooled)
            ce = cross_entropy(logits, batch["labels"], ls)
        else:
            rows = x.reshape(-1, self.C)[targets.reshape(-1) != -100]
            h = self.norm("mlm.norm", F.gelu(self.linear("mlm.dense", rows)))
            logits = h @ self.output_matrix().T + self.P["mlm.bias"]
            ce = cross_entropy(logits, targets.reshape(-1)[targets.reshape(-1) != -100], ls)
        return logits, ce, aux, x, embeds


def cross_entropy(logits, targets, ls):
    """Mean over rows with a target of (1 - ls)·(-log p_t) + ls·mean_j(-log p_j); checked against PyTorch's."""
    keep = targets != -100
    logp = torch.log_softmax(logits[keep], dim=-1)
    rows = (1 - ls) * -logp.gather(1, targets[keep][:, None])[:, 0] + ls * -logp.mean(-1)
    loss = rows.mean()
    ref = F.cross_entropy(logits, targets, ignore_index=-100, label_smoothing=ls)
    assert torch.allclose(loss, ref, rtol=1e-12, atol=1e-12, equal_nan=True), (loss, ref)
    return loss


def make_batch(cfg, model_name, case, labels, gen):
    V, shape = cfg["vocab_size"], SHAPES.get(model_name, DEFAULT_SHAPE)

    def ids(T, lengths):  # real tokens are 1..V-1; padding is 0, so token 0 is used only as padding
        return [[int(torch.randint(1, V, (1,), generator=gen)) if t < L else 0 for t in range(T)] for L in lengths]

    T, lengths = shape["T"], shape["lengths"]
    b = {"ids": ids(T, lengths), "lengths": lengths, "targets": [], "labels": []}
    if cfg["architecture"] != "encoder":
        b["targets"] = [[row[t + 1] if t + 1 < L else -100 for t in range(T)] for row, L in zip(b["ids"], lengths)]
        if cfg["architecture"] == "encoder-decoder":
            b["src_ids"], b["src_lengths"] = ids(shape["src_T"], shape["src_lengths"]), shape["src_lengths"]
    elif case == "mlm":
        b["targets"] = [[-100] * T for _ in lengths]
        for r, L in enumerate(lengths):
            picks = [t for t in range(L) if torch.rand((1,), generator=gen).item() < 0.3] or [L // 2]
            for t in picks:
                b["targets"][r][t] = int(torch.randint(1, V, (1,), generator=gen))
    else:
        b["labels"] = labels
    return b


def as_tensors(b):
    t = {k: torch.tensor(v, dtype=torch.long) for k, v in b.items()}
    if len(b["targets"]) == 0:
        t["targets"] = torch.full((len(b["lengths"]), len(b["ids"][0])), -100, dtype=torch.long)
    return t


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        values = t.detach().reshape(-1).tolist()
        data = struct.pack(f"<{len(values)}f", *values)  # rounds float64 to the nearest float32
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def check_padding_invariance(model, batch, hidden):
    """Each sequence alone, cut to its length, gives the same final states at its real positions."""
    for r, L in enumerate(batch["lengths"]):
        one = {"ids": [batch["ids"][r][:L]], "lengths": [L], "targets": [[-100] * L], "labels": []}
        if "src_ids" in batch:
            Ls = batch["src_lengths"][r]
            one.update(src_ids=[batch["src_ids"][r][:Ls]], src_lengths=[Ls])
        with torch.no_grad():
            alone = model.forward(as_tensors(one), 0.0)[3][0]
        assert torch.allclose(alone, hidden[r, :L], atol=1e-10), f"row {r}: padding leaks"


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "models")
    for name, overrides in MODELS.items():
        cfg = {**DEFAULTS, **TINY, **overrides}
        model, gen = Model(cfg), torch.Generator().manual_seed(sum(map(ord, name)))
        out = os.path.join(root, name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        write_safetensors(os.path.join(out, "model.safetensors"), model.P)
        cases = []
        for case, ls, labels in CASES[name]:
            batch = make_batch(cfg, name, case, labels, gen)
            logits, ce, aux, hidden, embeds = model.forward(as_tensors(batch), ls)
            loss = ce + cfg["moe_aux_loss_weight"] * aux
            assert torch.isfinite(loss) and torch.isfinite(logits).all()
            names = list(model.P)
            leaves = [model.P[n] for n in names] + embeds
            g = [torch.zeros_like(t) if d is None else d  # unused heads (MLM in cls cases) get zeros
                 for t, d in zip(leaves, torch.autograd.grad(loss, leaves, allow_unused=True))]
            grads = dict(zip(names, g))
            # Padding gets no gradient: the embedding outputs at padded positions, and (untied) token 0's row.
            all_lengths = ([batch["src_lengths"]] if "src_ids" in batch else []) + [batch["lengths"]]
            for ge, lengths in zip(g[len(names):], all_lengths):
                for r, L in enumerate(lengths):
                    assert ge[r, L:].abs().sum().item() == 0.0, f"{name}/{case}: padding has a gradient"
            if not cfg["tie_embeddings"]:
                assert grads["embed.tokens.weight"][0].abs().max().item() == 0.0
            if cfg["n_experts"] > 0:
                assert model.refused > 0, "capacity must refuse at least one choice"
                print(f"  {name}/{case}: {model.refused} MoE choices refused, smallest top-k gap {model.min_gap:.2e}")
            else:
                check_padding_invariance(model, batch, hidden.detach())
            write_safetensors(os.path.join(out, f"grads_{case}.safetensors"), grads)
            cases.append({"name": case, "label_smoothing": ls, "batch": batch, "logits_shape": list(logits.shape),
                          "logits": [float(v) for v in logits.detach().reshape(-1)], "loss": loss.item(),
                          "ce_loss": ce.item(), "aux_loss": aux.item(), "grads": f"grads_{case}.safetensors"})
            print(f"{name}/{case}: loss {loss.item():.6f} (ce {ce.item():.6f}, aux {aux.item():.6f})")
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump({"generator": f"tools/make_model_fixtures.py with torch {torch.__version__}", "cases": cases}, f)
        assert [n for n, _, _ in model.specs] == list(model.P)


if __name__ == "__main__":
    main()
