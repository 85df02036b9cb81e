#!/usr/bin/env python3
"""Makes tests/data/peft/: PEFT LoRA adapter directories for the tiny Hugging Face fixtures of each family, and the
logits of the base with the adapter applied by PEFT's formula, in plain PyTorch (no `peft`, no `transformers`).

For each case, random lora_A (r, in) and lora_B (out, r) (float32) on the modules target_modules names, matched as
PEFT matches them (a module whose name is the entry or ends with "." + entry), and the base's weights merged as
PEFT's merge does, in float64: W += s·B·A with s = lora_alpha / r (use_rslora: lora_alpha / √r), and for GPT-2's
Conv1D (fan_in_fan_out, W stored [in, out]) W += s·(B·A)ᵀ. The logits come from the family's reference forward
(tools/make_*_fixtures.py) on the merged weights.

  gpt2     tests/data/hf-gpt2           c_attn (q, k, v in one) and mlp.c_proj
  bert     tests/data/hf-bert/classifier  query, value, output.dense (attention.output.dense too), and the
                                        classifier saved whole (modules_to_save)
  t5       tests/data/hf-t5/v1_1        q, v (self and cross attention), wi_1 (gated up), wo; lora_dropout 0.1
  mistral  tests/data/hf-llama/mistral  every projection, rsLoRA: B's rows of q_proj and k_proj in the HF order
  mistral_patterns  the same with rank_pattern, alpha_pattern and exclude_modules: ranks 1-4 and alphas module
                    by module, one projection of block 1 left out
  gpt2_layers       c_attn and c_proj (attention's and the MLP's) in block 1 alone: layers_to_transform [1],
                    layers_pattern "h"
  t5_layers         q, v and wo with layers_to_transform [1] and no layers_pattern: PEFT then reads the number
                    after "layer" (a block's sub-layer: 1 is cross-attention or the FFN), not the block's

Which modules take an adapter, and each one's rank and alpha, follow PEFT's own functions (tools/peft_rules.py:
check_target_module_exists, get_pattern_key, on Python's re).

Each directory: adapter_config.json, adapter_model.safetensors, golden.json (the inputs and the logits).

    /usr/bin/python3 tools/make_peft_fixtures.py
"""
import importlib.util
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_py  # noqa: E402
from peft_rules import matched, pattern_value  # noqa: E402

torch.set_default_dtype(torch.float64)
DATA = os.path.join(HERE, "..", "tests", "data")
OUT = os.path.join(DATA, "peft")


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = {
    "gpt2": dict(base="hf-gpt2", r=2, alpha=4.0, rslora=False, dropout=0.0, fan_in_fan_out=True,
                 targets=["c_attn", "mlp.c_proj"], save=[], task="CAUSAL_LM", seed=81),
    "bert": dict(base="hf-bert/classifier", r=2, alpha=8.0, rslora=False, dropout=0.0, fan_in_fan_out=False,
                 targets=["query", "value", "output.dense"], save=["classifier"], task="SEQ_CLS", seed=82),
    "t5": dict(base="hf-t5/v1_1", r=4, alpha=8.0, rslora=False, dropout=0.1, fan_in_fan_out=False,
               targets=["q", "v", "wi_1", "wo"], save=[], task="SEQ_2_SEQ_LM", seed=83),
    "mistral": dict(base="hf-llama/mistral", r=2, alpha=4.0, rslora=True, dropout=0.0, fan_in_fan_out=False,
                    targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], save=[],
                    task="CAUSAL_LM", seed=84),
    "mistral_patterns": dict(base="hf-llama/mistral", r=2, alpha=4.0, rslora=True, dropout=0.0, fan_in_fan_out=False,
                             targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                             save=[], task="CAUSAL_LM", seed=85,
                             rank_pattern={"k_proj": 4, "model.layers.1.self_attn.q_proj": 3, r"layers\.0\..*up_proj": 1},
                             alpha_pattern={"v_proj": 7.0, r"mlp\.down_proj": 1.5},
                             exclude=["layers.1.mlp.gate_proj"]),
    "gpt2_layers": dict(base="hf-gpt2", r=3, alpha=6.0, rslora=False, dropout=0.0, fan_in_fan_out=True,
                        targets=["c_attn", "c_proj"], save=[], task="CAUSAL_LM", seed=86, layers=[1],
                        layers_pattern="h"),
    "t5_layers": dict(base="hf-t5/v1_1", r=2, alpha=8.0, rslora=False, dropout=0.0, fan_in_fan_out=False,
                      targets=["q", "v", "wo"], save=[], task="SEQ_2_SEQ_LM", seed=87, layers=[1]),
}


def make(name, case):
    base_dir = os.path.join(DATA, case["base"])
    with open(os.path.join(base_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(base_dir, "golden.json")) as f:
        golden = json.load(f)
    w = safetensors_py.read(os.path.join(base_dir, "model.safetensors"))
    g = torch.Generator().manual_seed(case["seed"])
    adapter_config = {
        "peft_type": "LORA", "task_type": case["task"], "base_model_name_or_path": None, "r": case["r"],
        "lora_alpha": case["alpha"], "lora_dropout": case["dropout"], "target_modules": case["targets"],
        "use_rslora": case["rslora"], "use_dora": False, "bias": "none", "fan_in_fan_out": case["fan_in_fan_out"],
        "modules_to_save": case["save"] or None, "init_lora_weights": True, "inference_mode": True,
        "rank_pattern": case.get("rank_pattern", {}), "alpha_pattern": case.get("alpha_pattern", {}),
        "layers_to_transform": case.get("layers"), "layers_pattern": case.get("layers_pattern"),
        "exclude_modules": case.get("exclude"),
    }
    adapter, merged = {}, dict(w)
    for key in sorted(w):
        if not key.endswith(".weight") or w[key].dim() != 2:
            continue
        module = key[:-len(".weight")]
        hf_module = "transformer." + module if name.startswith("gpt2") else module  # GPT2LMHeadModel's path
        if not matched(hf_module, adapter_config) or "embed" in module or module.endswith("wte") or \
                module.endswith("wpe") or module.endswith("relative_attention_bias") or module == "lm_head":
            continue
        r = pattern_value(adapter_config["rank_pattern"], hf_module, case["r"])
        alpha = pattern_value(adapter_config["alpha_pattern"], hf_module, case["alpha"])
        scale = alpha / (math.sqrt(r) if case["rslora"] else r)
        out_features, in_features = (w[key].shape[1], w[key].shape[0]) if case["fan_in_fan_out"] else w[key].shape
        a = (torch.randn(r, in_features, generator=g) / math.sqrt(in_features)).float().double()
        b = (0.3 * torch.randn(out_features, r, generator=g)).float().double()
        delta = scale * (b @ a)
        merged[key] = w[key] + (delta.T if case["fan_in_fan_out"] else delta)
        adapter[f"base_model.model.{hf_module}.lora_A.weight"] = a
        adapter[f"base_model.model.{hf_module}.lora_B.weight"] = b
    for module in case["save"]:  # trained whole: new values
        for kind in ("weight", "bias"):
            key = f"{module}.{kind}"
            merged[key] = (0.5 * torch.randn(*w[key].shape, generator=g)).float().double()
            adapter[f"base_model.model.{key}"] = merged[key]
    assert adapter, name

    if name.startswith("gpt2"):
        tool = load_tool("make_gpt2_fixtures")
        inputs = {"prompt_ids": golden["prompt_ids"]}
        logits = tool.forward(merged, golden["prompt_ids"])
    elif name.startswith("bert"):
        tool = load_tool("make_bert_fixtures")
        v = tool.VARIANTS["classifier"]
        rows = []
        for ids, n in zip(golden["ids"], golden["lengths"]):
            h = tool.encode(v, merged, ids, [0] * len(ids), n)
            pooled = torch.tanh(h[0] @ merged["bert.pooler.dense.weight"].T + merged["bert.pooler.dense.bias"])
            rows.append(pooled @ merged["classifier.weight"].T + merged["classifier.bias"])
        inputs = {"ids": golden["ids"], "lengths": golden["lengths"]}
        logits = torch.stack(rows)
    elif name.startswith("t5"):
        tool = load_tool("make_t5_fixtures")
        v = tool.VARIANTS["v1_1"]
        enc = tool.encode(config, v, merged, golden["src_ids"])
        logits = tool.decode(config, v, merged, enc, golden["decoder_ids"], [None] * v["decoder_layers"])
        inputs = {"src_ids": golden["src_ids"], "decoder_ids": golden["decoder_ids"]}
    else:
        tool = load_tool("make_llama_fixtures")
        logits = tool.forward(config, merged, golden["prompt_ids"], [None] * tool.L)
        inputs = {"prompt_ids": golden["prompt_ids"]}
    base_logits = torch.tensor(golden["logits"]).view(logits.shape)
    change = (logits - base_logits).abs().max().item()
    assert change > 1e-2, f"{name}: the adapter hardly changes the logits ({change})"

    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(adapter_config, f, indent=2)
        f.write("\n")
    safetensors_py.write(os.path.join(d, "adapter_model.safetensors"), adapter, "F32")
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(dict(inputs, base=case["base"], logits_shape=list(logits.shape), logits=logits.flatten().tolist()),
                  f)
        f.write("\n")
    print(f"{name}: {len(adapter)} tensors, the logits move by up to {change:.3f}")


def main():
    for name, case in CASES.items():
        make(name, case)


if __name__ == "__main__":
    main()
