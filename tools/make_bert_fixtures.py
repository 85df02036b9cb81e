#!/usr/bin/env python3
"""Makes tests/data/hf-bert/: tiny BERT checkpoints in Hugging Face's exact layout, with golden outputs.

Plain PyTorch (no `transformers`), float64 math on the stored (rounded) weights, mirroring transformers' BERT line by
line:
  - BertEmbeddings: word + position (absolute, learned) + token type embeddings, LayerNorm, dropout
  - each BertLayer, post-LN: h = LayerNorm(x + dense(attention(x))), then LayerNorm(h + dense(gelu(dense(h))))
    (BertSelfAttention: query, key, value with biases, softmax(q·kᵀ/√d + mask)·v; BertSelfOutput; BertIntermediate
    with hidden_act "gelu", the exact erf GELU; BertOutput); padding keys masked by the attention mask
  - BertForMaskedLM: cls.predictions.transform (dense, gelu, LayerNorm), then the word embeddings (tied) and
    cls.predictions.bias; the loss a cross-entropy over the labelled positions (others -100)
  - BertForSequenceClassification: BertPooler tanh(dense(h[CLS])), then classifier; the loss a cross-entropy over
    the sequences' labels
  - BertModel: the encoder with its pooler and no head

Variants (each a directory with config.json, model.safetensors, golden.json):
  mlm         BertForMaskedLM (tensors under bert.* and cls.*), a sentence pair with token types 0 and 1, F32
  classifier  BertForSequenceClassification with three named labels, two sequences (one padded), BF16
  base        BertModel (unprefixed names, a pooler), F32; position_ids buffer in the file, as older exports have

    /usr/bin/python3 tools/make_bert_fixtures.py
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf-bert")
V, C, L, H, F, P, TYPES = 64, 32, 2, 4, 48, 24, 2
EPS = 1e-12

BASE_CONFIG = {
    "model_type": "bert", "vocab_size": V, "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": H,
    "intermediate_size": F, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": P, "type_vocab_size": TYPES, "initializer_range": 0.02, "layer_norm_eps": EPS,
    "pad_token_id": 0, "position_embedding_type": "absolute", "use_cache": True, "classifier_dropout": None,
}
VARIANTS = {
    "mlm": dict(seed=70, dtype="F32", arch="BertForMaskedLM", prefix="bert.", pooler=False),
    "classifier": dict(seed=71, dtype="BF16", arch="BertForSequenceClassification", prefix="bert.", pooler=True,
                       labels=["negative", "neutral", "positive"]),
    "base": dict(seed=72, dtype="F32", arch="BertModel", prefix="", pooler=True),
}


def make_weights(seed, v):
    torch.manual_seed(seed)

    def r(std, *shape, mean=0.0):
        return mean + std * torch.randn(*shape)

    p = v["prefix"]
    w = {p + "embeddings.word_embeddings.weight": r(0.5, V, C),
         p + "embeddings.position_embeddings.weight": r(0.3, P, C),
         p + "embeddings.token_type_embeddings.weight": r(0.3, TYPES, C),
         p + "embeddings.LayerNorm.weight": r(0.1, C, mean=1.0), p + "embeddings.LayerNorm.bias": r(0.1, C)}
    for i in range(L):
        q = f"{p}encoder.layer.{i}."
        for n in ("query", "key", "value"):
            w[q + f"attention.self.{n}.weight"] = r(0.2, C, C)
            w[q + f"attention.self.{n}.bias"] = r(0.1, C)
        w[q + "attention.output.dense.weight"] = r(0.2, C, C)
        w[q + "attention.output.dense.bias"] = r(0.1, C)
        w[q + "attention.output.LayerNorm.weight"] = r(0.1, C, mean=1.0)
        w[q + "attention.output.LayerNorm.bias"] = r(0.1, C)
        w[q + "intermediate.dense.weight"] = r(0.2, F, C)
        w[q + "intermediate.dense.bias"] = r(0.1, F)
        w[q + "output.dense.weight"] = r(0.2, C, F)
        w[q + "output.dense.bias"] = r(0.1, C)
        w[q + "output.LayerNorm.weight"] = r(0.1, C, mean=1.0)
        w[q + "output.LayerNorm.bias"] = r(0.1, C)
    if v["pooler"]:
        w[p + "pooler.dense.weight"] = r(0.2, C, C)
        w[p + "pooler.dense.bias"] = r(0.1, C)
    if v["arch"] == "BertForMaskedLM":
        w["cls.predictions.transform.dense.weight"] = r(0.2, C, C)
        w["cls.predictions.transform.dense.bias"] = r(0.1, C)
        w["cls.predictions.transform.LayerNorm.weight"] = r(0.1, C, mean=1.0)
        w["cls.predictions.transform.LayerNorm.bias"] = r(0.1, C)
        w["cls.predictions.bias"] = r(0.1, V)
    if v["arch"] == "BertForSequenceClassification":
        w["classifier.weight"] = r(0.3, len(v["labels"]), C)
        w["classifier.bias"] = r(0.1, len(v["labels"]))
    return w


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def encode(v, w, ids, types, length):
    """BertModel's last hidden states (T, C) of one sequence whose first `length` tokens are real."""
    p, T, D = v["prefix"], len(ids), C // H
    x = (w[p + "embeddings.word_embeddings.weight"][torch.tensor(ids)] +
         w[p + "embeddings.position_embeddings.weight"][:T] +
         w[p + "embeddings.token_type_embeddings.weight"][torch.tensor(types)])
    x = layer_norm(x, w[p + "embeddings.LayerNorm.weight"], w[p + "embeddings.LayerNorm.bias"])
    keys = torch.arange(T) < length
    for i in range(L):
        q_ = f"{p}encoder.layer.{i}."
        lin = lambda h, n: h @ w[q_ + n + ".weight"].T + w[q_ + n + ".bias"]  # noqa: E731
        q, k, val = (lin(x, f"attention.self.{n}").view(T, H, D).transpose(0, 1) for n in ("query", "key", "value"))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(~keys[None, None, :], float("-inf"))
        o = (torch.softmax(s, dim=-1) @ val).transpose(0, 1).reshape(T, C)
        x = layer_norm(x + lin(o, "attention.output.dense"), w[q_ + "attention.output.LayerNorm.weight"],
                       w[q_ + "attention.output.LayerNorm.bias"])
        h = lin(gelu(lin(x, "intermediate.dense")), "output.dense")
        x = layer_norm(x + h, w[q_ + "output.LayerNorm.weight"], w[q_ + "output.LayerNorm.bias"])
    return x


def make(name, v):
    config = dict(BASE_CONFIG, architectures=[v["arch"]])
    if "labels" in v:
        config["id2label"] = {str(i): n for i, n in enumerate(v["labels"])}
        config["label2id"] = {n: i for i, n in enumerate(v["labels"])}
    config["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16"}[v["dtype"]]
    w = {k: safetensors_py.rounded(t, v["dtype"]) for k, t in make_weights(v["seed"], v).items()}
    g = torch.Generator().manual_seed(v["seed"] + 1)
    golden = {}
    if v["arch"] == "BertForMaskedLM":  # "[CLS] a a a [SEP] b b b b [SEP]" with types 0 then 1
        ids = [2] + torch.randint(5, V, (4,), generator=g).tolist() + [3] + torch.randint(5, V, (5,), generator=g).tolist() + [3]
        types = [0] * 6 + [1] * 6
        h = encode(v, w, ids, types, len(ids))
        t = gelu(h @ w["cls.predictions.transform.dense.weight"].T + w["cls.predictions.transform.dense.bias"])
        t = layer_norm(t, w["cls.predictions.transform.LayerNorm.weight"], w["cls.predictions.transform.LayerNorm.bias"])
        logits = t @ w["bert.embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
        labels = [-100] * len(ids)
        for at in (2, 7, 9):
            labels[at] = int(torch.randint(5, V, (1,), generator=g))
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels), ignore_index=-100)
        golden = {"ids": ids, "token_types": types, "logits": logits.flatten().tolist(), "labels": labels,
                  "loss": loss.item()}
    elif v["arch"] == "BertForSequenceClassification":  # two sequences of 9, the second padded after 6
        seqs = [[2] + torch.randint(5, V, (7,), generator=g).tolist() + [3],
                [2] + torch.randint(5, V, (4,), generator=g).tolist() + [3, 0, 0, 0]]
        lengths, labels, rows = [9, 6], [2, 0], []
        for ids, n in zip(seqs, lengths):
            h = encode(v, w, ids, [0] * len(ids), n)
            pooled = torch.tanh(h[0] @ w["bert.pooler.dense.weight"].T + w["bert.pooler.dense.bias"])
            rows.append(pooled @ w["classifier.weight"].T + w["classifier.bias"])
        logits = torch.stack(rows)
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels))
        golden = {"ids": seqs, "lengths": lengths, "labels": labels, "logits": logits.flatten().tolist(),
                  "loss": loss.item()}
    else:  # BertModel: the hidden states and the pooled output
        ids = [2] + torch.randint(5, V, (8,), generator=g).tolist() + [3]
        h = encode(v, w, ids, [0] * len(ids), len(ids))
        pooled = torch.tanh(h[0] @ w["pooler.dense.weight"].T + w["pooler.dense.bias"])
        golden = {"ids": ids, "hidden": h.flatten().tolist(), "pooled": pooled.tolist()}

    tensors = dict(w)
    if name == "base":  # the position_ids buffer older exports carry (a parameter-free int64 table in real files)
        tensors["embeddings.position_ids"] = torch.arange(P, dtype=torch.float64)[None, :]
    safetensors_py.write_checkpoint(os.path.join(OUT, name), config, tensors, v["dtype"], golden)
    print(f"{name}: " + (f"loss {golden['loss']:.6f}" if "loss" in golden else f"hidden std {h.std().item():.3f}"))


def main():
    for name, v in VARIANTS.items():
        make(name, v)


if __name__ == "__main__":
    main()
