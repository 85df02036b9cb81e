#!/usr/bin/env python3
"""`attend export --format hf` of Hugging Face checkpoints gives back what was read: a BF16 checkpoint's tensors
byte for byte in BF16 (they came back as F32, twice the size), config.json's token ids (a Mistral lost its EOS and
generated past it), the directory's generation_config.json and tokenizer_config.json; --dtype picks another type;
shards of an earlier model in the output directory are removed.

  python3 tests/export_cli.py --attend build/attend --data tests/data --work /tmp/attend_export_cli

Exits 0 when every check passed, 1 with the first failure.
"""
import json
import os
import shutil
import struct

import tiny_runs

fail, run = tiny_runs.checks("export_cli")


def tensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, base = json.loads(raw[8:8 + n]), 8 + n
    return {k: (v["dtype"], v["shape"], raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def main():
    attend, work, data = tiny_runs.paths(__doc__, "data")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    # A BF16 checkpoint: the same tensors, bytes and all, and its torch_dtype.
    source = os.path.join(data, "hf-gemma3", "layer-types")
    out = os.path.join(work, "gemma")
    os.makedirs(out)
    open(os.path.join(out, "model-00001-of-00002.safetensors"), "w").write("stale")
    open(os.path.join(out, "model.safetensors.index.json"), "w").write("{}")
    run([attend, "export", "--model", source, "--format", "hf", "-o", out])
    want, got = tensors(os.path.join(source, "model.safetensors")), tensors(os.path.join(out, "model.safetensors"))
    if {v[0] for v in want.values()} != {"BF16"}:
        fail("the fixture is not BF16")
    if want != got:
        fail("the BF16 tensors did not come back byte for byte: "
             f"{sorted(k for k in want if want[k] != got.get(k))[:3]}")
    if json.load(open(os.path.join(out, "config.json")))["torch_dtype"] != "bfloat16":
        fail("torch_dtype is not bfloat16")
    for stale in ("model-00001-of-00002.safetensors", "model.safetensors.index.json"):
        if os.path.exists(os.path.join(out, stale)):
            fail(f"{stale} of an earlier model left beside the export")
    run([attend, "export", "--model", source, "--format", "hf", "--dtype", "f16", "-o", out])
    if {v[0] for v in tensors(os.path.join(out, "model.safetensors")).values()} != {"F16"} or \
            json.load(open(os.path.join(out, "config.json")))["torch_dtype"] != "float16":
        fail("--dtype f16 did not write F16")

    # A Mistral with its token ids, a generation_config.json and a tokenizer_config.json beside.
    mistral = os.path.join(work, "mistral-source")
    shutil.copytree(os.path.join(data, "hf-llama", "mistral"), mistral)
    generation = {"bos_token_id": 1, "eos_token_id": [2, 7], "max_new_tokens": 9}
    json.dump(generation, open(os.path.join(mistral, "generation_config.json"), "w"))
    tokenizer_config = {"add_bos_token": True, "chat_template": "{{ messages[0]['content'] }}"}
    json.dump(tokenizer_config, open(os.path.join(mistral, "tokenizer_config.json"), "w"))
    out = os.path.join(work, "mistral")
    run([attend, "export", "--model", mistral, "--format", "hf", "-o", out])
    before, after = json.load(open(os.path.join(mistral, "config.json"))), json.load(open(os.path.join(out, "config.json")))
    for key in ("bos_token_id", "eos_token_id"):
        if key in before and after.get(key) != before[key]:
            fail(f"config.json's {key}: {after.get(key)} after export, {before[key]} before")
    for name, content in (("generation_config.json", generation), ("tokenizer_config.json", tokenizer_config)):
        if json.load(open(os.path.join(out, name))) != content:
            fail(f"{name} not carried over")
    ids = lambda model: json.loads(run([attend, "generate", "--model", model, "--prompt-ids", "3,9,4", "--greedy",
                                        "--max-new-tokens", "8", "--json"]))["ids"]
    if ids(out) != ids(mistral):
        fail(f"the export generates {ids(out)}, the checkpoint {ids(mistral)}")
    print("export_cli: BF16 byte for byte, --dtype, token ids and generation files carried over, stale shards removed")


if __name__ == "__main__":
    main()
