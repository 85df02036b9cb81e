#!/usr/bin/env python3
"""PEFT adapters whose modules have ranks and alphas of their own (rank_pattern, alpha_pattern), or that leave some
modules out (layers_to_transform, exclude_modules), as `attend export` writes them back: PEFT, deciding with its own
functions (check_target_module_exists, get_pattern_key: the same lines as tools/make_peft_fixtures.py, on Python's
re), must find in Attend's adapter_config.json the same modules, each with the update scale·B·A of the adapter read.
Checked for the PEFT directories of tests/data/peft written back as PEFT's files directly, and through a GGUF LoRA
file (each tensor pair at its own rank, one alpha).

  python3 tests/peft_patterns.py --attend build/attend --data tests/data --work /tmp/attend_peft_patterns

Exits 0 when every check passed, 1 with the first failure.
"""
import json
import math
import os
import shutil
import struct
import sys

import tiny_runs

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from peft_rules import matched, pattern_value  # noqa: E402

fail, run = tiny_runs.checks("peft_patterns")


def tensors(path, values=True):
    """{name: (shape, [floats])} of a safetensors file of F32 tensors (or its shapes alone)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, base = json.loads(raw[8:8 + n]), 8 + n
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        if not values:
            out[k] = (v["shape"], None)
            continue
        if v["dtype"] != "F32":
            fail(f"{path}: {k} is {v['dtype']}, expected F32")
        begin, end = v["data_offsets"]
        out[k] = (v["shape"], struct.unpack(f"<{(end - begin) // 4}f", raw[base + begin:base + end]))
    return out


def updates(adapter_dir, modules):
    """{module: (rank, scale·B·A as a flat list)} of the modules PEFT adapts with this directory."""
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        config = json.load(f)
    file = tensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    out = {}
    for module in modules:
        if not matched(module, config):
            continue
        r = pattern_value(config.get("rank_pattern"), module, config["r"])
        alpha = pattern_value(config.get("alpha_pattern"), module, config["lora_alpha"])
        scale = alpha / (math.sqrt(r) if config.get("use_rslora") else r)
        (a_shape, a), (b_shape, b) = (file[f"base_model.model.{module}.lora_{x}.weight"] for x in "AB")
        if a_shape[0] != r or b_shape[1] != r:
            fail(f"{adapter_dir}: {module} has A {a_shape} and B {b_shape}, PEFT takes r = {r}")
        inp, outp = a_shape[1], b_shape[0]
        delta = [scale * sum(b[i * r + k] * a[k * inp + j] for k in range(r)) for i in range(outp) for j in range(inp)]
        out[module] = (r, delta)
    return out


def same_updates(want, got, what):
    if sorted(want) != sorted(got):
        fail(f"{what}: PEFT adapts {sorted(set(got) ^ set(want))} on one side only")
    for module, (r, delta) in want.items():
        largest = max(abs(x) for x in delta)
        worst = max(abs(x - y) for x, y in zip(delta, got[module][1]))
        if worst > 1e-5 * largest:
            fail(f"{what}: {module}'s update differs by {worst:.3g} (largest {largest:.3g})")


def main():
    attend, work, data = tiny_runs.paths(__doc__, "data")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for case in ("mistral_patterns", "gpt2_layers", "t5_layers"):
        source = os.path.join(data, "peft", case)
        with open(os.path.join(source, "golden.json")) as f:
            base = os.path.join(data, json.load(f)["base"])
        with open(os.path.join(base, "config.json")) as f:
            gpt2 = json.load(f).get("model_type") == "gpt2"
        # Every linear layer's name as PEFT sees it in the model (GPT2LMHeadModel's under "transformer.").
        modules = [("transformer." if gpt2 else "") + name[:-len(".weight")]
                   for name, (shape, _) in tensors(os.path.join(base, "model.safetensors"), values=False).items()
                   if name.endswith(".weight") and len(shape) == 2]
        want = updates(source, modules)
        if not want:
            fail(f"{case}: the fixture adapts nothing")
        written = os.path.join(work, case)
        run([attend, "export", "--format", "peft", "--model", base, "--lora", source, "-o", written])
        same_updates(want, updates(written, modules), f"{case} written as PEFT's files")
        with open(os.path.join(written, "adapter_config.json")) as f:
            config = json.load(f)
        if case == "mistral_patterns" and not config.get("rank_pattern"):
            fail(f"{case}: no rank_pattern written for ranks 1 to 4")
        # `attend inspect --lora`: the adapters counted, each module at the rank PEFT gives it.
        inspected = json.loads(run([attend, "inspect", base, "--lora", source, "--json"]))
        ranks = {t["name"][:t["name"].index(".lora_A")]: t["shape"][0] for t in inspected["tensors"]
                 if t["role"] == "lora_a"}
        if sorted(ranks.values()) != sorted(r for r, _ in want.values()) if case != "gpt2_layers" else len(ranks) != 5:
            fail(f"{case}: inspect lists adapters of ranks {sorted(ranks.values())}, PEFT's are "
                 f"{sorted(r for r, _ in want.values())}")
        # The Llama family's modules are one adapter each: the count is the file's (GPT-2's c_attn is three).
        in_file = sum(shape[0] * shape[1] for shape, _ in
                      tensors(os.path.join(source, "adapter_model.safetensors"), values=False).values())
        if case == "mistral_patterns" and inspected["parameters"]["adapters"] != in_file:
            fail(f"{case}: inspect counts {inspected['parameters']['adapters']} adapter parameters, the file {in_file}")
        if "ranks module by module" not in run([attend, "inspect", base, "--lora", source, "--summary"]):
            fail(f"{case}: inspect's summary does not say the ranks are module by module")
        if case != "t5_layers":  # llama.cpp's LoRA files are for generating models
            gguf = os.path.join(work, case + ".gguf")
            run([attend, "export", "--format", "gguf-lora", "--model", base, "--lora", source, "-o", gguf])
            back = os.path.join(work, case + "_from_gguf")
            run([attend, "export", "--format", "peft", "--model", base, "--lora", gguf, "-o", back])
            same_updates(want, updates(back, modules), f"{case} through a GGUF LoRA")
        print(f"{case}: {len(want)} modules adapted as PEFT reads Attend's files")
    print("every check passed")


if __name__ == "__main__":
    main()
