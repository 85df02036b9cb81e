#!/usr/bin/env python3
"""LoRA from the command line: a Llama-style base trained, LoRA adapters trained on it (train.init_from with
model.lora_r), exported as PEFT's files, and run on the base with --lora: the same greedy tokens and the same
evaluation loss as the LoRA run's own checkpoint. A second adapter: --lora DIR:0 is the base; `attend serve` with
both adapters answers requests for each (and for the base) batched together exactly as one at a time.

  python3 tests/lora_cli.py --attend build/attend --work /tmp/attend_lora_cli

Exits 0 when every check passed, 1 with the first failure.
"""
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import urllib.request

import tiny_runs

fail, run = tiny_runs.checks("lora_cli")


def losses(out):
    """The training losses of a run directory, step by step."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


def per_module(attend, work, base, peft, more):
    """An adapter with ranks module by module (block 1 alone, v_proj at rank 2, o_proj at alpha 3) trains on
    (train.lora.from): the checkpoint holds the file's modules (config.json's lora_per_module); a run of two steps
    resumed to three gives the straight run's losses and bytes; exported as PEFT, the trained adapter has the file's
    modules at their ranks; a checkpoint of it starts another run (train.init_from) with those adapters."""
    cut = os.path.join(work, "peft-cut")
    tiny_runs.cut_peft_adapter(peft, cut)
    steady = [*more, "--set", "train.schedule=warmup"]  # the same rate at each step whatever train.steps says
    straight, halted = os.path.join(work, "cut-straight"), os.path.join(work, "cut-halted")
    for out, steps, resume in ((straight, 3, []), (halted, 2, []), (halted, 3, ["--resume"])):
        run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", f"train.lora.from={cut}",
             *steady, "--set", f"train.steps={steps}", "--set", f"out={out}", *resume])
    if len(losses(straight)) != 3 or losses(halted) != losses(straight):
        fail(f"train.lora.from a per-module adapter: resumed losses {losses(halted)}, straight {losses(straight)}")
    for name in ("model.safetensors", "optimizer.safetensors"):
        with open(os.path.join(straight, "checkpoint", name), "rb") as f, \
                open(os.path.join(halted, "checkpoint", name), "rb") as g:
            if f.read() != g.read():
                fail(f"train.lora.from a per-module adapter: the resumed run's {name} differs from the straight run's")
    with open(os.path.join(straight, "checkpoint", "config.json")) as f:
        ranks = json.load(f)["lora_per_module"]
    want = {f"decoder.layers.1.{m}": r for m, r in (("attn.qkv.q", 4), ("attn.qkv.k", 4), ("attn.qkv.v", 2),
                                                        ("attn.o", 4), ("ffn.up", 4), ("ffn.gate", 4), ("ffn.down", 4))}
    if {k: v["r"] for k, v in ranks.items()} != want or ranks["decoder.layers.1.attn.o"]["alpha"] != 3.0:
        fail(f"train.lora.from a per-module adapter: the checkpoint's lora_per_module is {ranks}")
    again = os.path.join(work, "peft-cut-trained")
    run([attend, "export", "--model", f"{straight}/checkpoint", "--format", "peft", "-o", again])
    with open(os.path.join(again, "adapter_config.json")) as f:
        config = json.load(f)
    if [r for key, r in config["rank_pattern"].items() if key.endswith("v_proj")] != [2] or \
            any(".layers.0." in t or t.endswith("_proj") and "." not in t for t in config["target_modules"]):
        fail(f"the trained per-module adapter exported as PEFT: adapter_config.json {config}")
    # train.lora.layers naming the adapter's block trains it the same; naming another is refused, naming the modules;
    # and the trained checkpoint (block 1's adapters) does not go on as train.lora.layers' block 0.
    layered = os.path.join(work, "cut-layered")
    run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", f"train.lora.from={cut}", *steady,
         "--set", "train.lora.layers=1", "--set", f"out={layered}"])
    if losses(layered) != losses(straight):
        fail(f"train.lora.from with train.lora.layers=1: losses {losses(layered)}, without {losses(straight)}")
    for what, options, message in (
            ("rslora", [f"train.init_from={base}/checkpoint", f"train.lora.from={cut}", "train.lora.rslora=true"],
             "rslora false (train.lora true)"),
            ("layers 0", [f"train.init_from={base}/checkpoint", f"train.lora.from={cut}", "train.lora.layers=0"],
             "decoder.layers.1.attn.o"),
            ("layers 0 on its checkpoint", [f"train.init_from={straight}/checkpoint", "train.lora.layers=0"],
             "train.lora.layers' decoder.layers.0.")):
        proc = subprocess.run([attend, "train", *[x for o in options for x in ("--set", o)], *steady,
                               "--set", f"out={os.path.join(work, 'cut-wrong')}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 0 or message not in proc.stderr:
            fail(f"train.lora.from a per-module adapter, {what}: exit {proc.returncode}, {proc.stderr[-400:]!r}")


def main():
    attend, work = tiny_runs.paths(__doc__)
    text, common = tiny_runs.corpus(run, attend, work, documents=True)
    common += ["--set", "train.steps=20"]
    base = os.path.join(work, "base")
    run([attend, "train", "--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "model.n_heads=4",
         "--set", "model.n_kv_heads=2", "--set", "model.max_seq_len=64", "--set", "model.position=rope",
         "--set", "model.norm=rmsnorm", "--set", "model.activation=swiglu", "--set", "model.bias=false",
         *common, "--set", f"out={base}"])
    lora = os.path.join(work, "lora")
    out = run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", "model.lora_r=4",
               "--set", "model.lora_alpha=8", "--set", "model.lora_targets=q,k,v,o,up,gate,down",
               "--set", "train.lr=1e-2", *common, "--set", f"out={lora}"])
    inspect = run([attend, "inspect", f"{lora}/checkpoint", "--summary"])
    if "LoRA r = 4 on q, k, v, o, up, gate, down" not in inspect:
        fail(f"attend inspect does not count the adapters:\n{inspect}")
    peft = os.path.join(work, "peft")
    run([attend, "export", "--model", f"{lora}/checkpoint", "--format", "peft", "-o", peft])
    with open(os.path.join(peft, "adapter_config.json")) as f:
        config = json.load(f)
    if config["peft_type"] != "LORA" or config["r"] != 4 or config["lora_alpha"] != 8:
        fail(f"adapter_config.json: {config}")
    # Training goes on from the PEFT files on the base (train.lora.from) exactly as from the LoRA checkpoint itself:
    # the same losses, step for step, and the same adapters after.
    more = ["--set", "train.lora.r=4", "--set", "train.lora.alpha=8", "--set", "train.lora.targets=q,k,v,o,up,gate,down",
            "--set", "train.lr=1e-2", *common, "--set", "train.steps=3"]
    on_checkpoint, on_peft = os.path.join(work, "more-checkpoint"), os.path.join(work, "more-peft")
    run([attend, "train", "--set", f"train.init_from={lora}/checkpoint", *more, "--set", f"out={on_checkpoint}"])
    run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", f"train.lora.from={peft}", *more,
         "--set", f"out={on_peft}"])

    if not losses(on_peft) or losses(on_peft) != losses(on_checkpoint):
        fail(f"train.lora.from: losses {losses(on_peft)}, from the LoRA checkpoint {losses(on_checkpoint)}")
    for a, b in ((on_peft, on_checkpoint),):
        with open(os.path.join(a, "checkpoint", "model.safetensors"), "rb") as f, \
                open(os.path.join(b, "checkpoint", "model.safetensors"), "rb") as g:
            if f.read() != g.read():
                fail("train.lora.from: the adapters after three steps differ from the LoRA checkpoint's")
    proc = subprocess.run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set",
                           f"train.lora.from={peft}", "--set", "train.lora.r=2", *more[2:], "--set", "train.lora.r=2",
                           "--set", f"out={os.path.join(work, 'more-wrong')}"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode == 0 or "r 4 (train.lora 2)" not in proc.stderr:
        fail(f"train.lora.from with another rank: exit {proc.returncode}, {proc.stderr[-400:]!r}")
    # Formats without adapters refuse a LoRA checkpoint (they wrote the base, silently) and name what writes them.
    for cmd in ([attend, "export", "--model", f"{lora}/checkpoint", "--format", "hf", "-o", os.path.join(work, "no")],
                [attend, "export", "--model", f"{lora}/checkpoint", "--format", "gguf", "-o", os.path.join(work, "no.gguf")],
                [attend, "quantize", "--model", f"{lora}/checkpoint", "--type", "q8_0", "-o", os.path.join(work, "q.gguf")]):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 0 or "merge-lora" not in proc.stderr or "LoRA adapters" not in proc.stderr:
            fail(f"{' '.join(cmd[1:])}: exit {proc.returncode}, {proc.stderr!r}")
        if any(os.path.exists(cmd[-1] + tail) for tail in ("", ".tmp")):
            fail(f"{cmd[-1]}: written after the refusal")
    # A GGUF LoRA file given as a model is named for what it is (it was "no 2-dimensional tensor 'token_embd.weight'").
    lora_gguf = os.path.join(work, "lora.gguf")
    run([attend, "export", "--model", f"{lora}/checkpoint", "--format", "gguf-lora", "-o", lora_gguf])
    # ... and from the GGUF LoRA file (one rank on every block: a set as the run's own, alpha / r its scale).
    on_gguf = os.path.join(work, "more-gguf")
    run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", f"train.lora.from={lora_gguf}",
         *more, "--set", f"out={on_gguf}"])
    if losses(on_gguf) != losses(on_checkpoint):
        fail(f"train.lora.from a GGUF LoRA: losses {losses(on_gguf)}, from the LoRA checkpoint {losses(on_checkpoint)}")
    proc = subprocess.run([attend, "inspect", lora_gguf], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode == 0 or "a GGUF LoRA adapter, not a model" not in proc.stderr:
        fail(f"inspect of a GGUF LoRA file: exit {proc.returncode}, {proc.stderr!r}")
    per_module(attend, work, base, peft, more)

    def generate(model, *extra):
        result = run([attend, "generate", "--model", model, "--prompt", "the jury said", "--max-new-tokens", "12",
                      "--greedy", "--json", *extra])
        return json.loads(result)["ids"]

    own = generate(f"{lora}/checkpoint")
    adapted = generate(f"{base}/checkpoint", "--lora", peft)
    plain = generate(f"{base}/checkpoint")
    if own != adapted:
        fail(f"the base with --lora generates {adapted}, the LoRA checkpoint {own}")
    # llama.cpp's GGUF LoRA file of the same adapters, read back.
    if generate(f"{base}/checkpoint", "--lora", lora_gguf) != own:
        fail("the base with --lora lora.gguf does not generate the LoRA checkpoint's tokens")

    valid = os.path.join(work, "valid.txt")
    with open(text) as f, open(valid, "w") as g:
        g.write("".join(f.readlines()[:200]))

    def evaluate(model, *extra):
        result = run([attend, "eval", "--model", model, "--data", valid, *extra])
        return [line for line in result.splitlines() if "perplexity" in line]

    if evaluate(f"{lora}/checkpoint") != evaluate(f"{base}/checkpoint", "--lora", peft):
        fail("attend eval with --lora differs from the LoRA checkpoint's")
    # merge-lora: W + s·B·A written as a plain model, from the checkpoint and from the base with the PEFT files.
    merged, merged_peft = os.path.join(work, "merged"), os.path.join(work, "merged_peft")
    run([attend, "merge-lora", "--model", f"{lora}/checkpoint", "-o", merged])
    run([attend, "merge-lora", "--model", f"{base}/checkpoint", "--lora", peft, "-o", merged_peft])
    for m in (merged, merged_peft):
        if "adapters" in run([attend, "inspect", m, "--summary"]):
            fail(f"{m}: the merged model still has adapters")
    # Its output over its input is refused (a LoRA checkpoint lost its adapters, its optimizer state left behind).
    before = open(os.path.join(lora, "checkpoint", "config.json")).read()
    proc = subprocess.run([attend, "merge-lora", "--model", f"{lora}/checkpoint", "-o", f"{lora}/checkpoint/"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode == 0 or "is the --model directory" not in proc.stderr:
        fail(f"merge-lora over its own input: exit {proc.returncode}, {proc.stderr!r}")
    if open(os.path.join(lora, "checkpoint", "config.json")).read() != before:
        fail("merge-lora over its own input changed the checkpoint")
    # A base's generation files (its EOS ids, its chat template) come with the merged model.
    with_files = os.path.join(work, "base_with_files")
    shutil.copytree(f"{base}/checkpoint", with_files)
    side = {"generation_config.json": '{"eos_token_id": [0, 7]}\n',
            "tokenizer_config.json": '{"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}\n'}
    for name, content in side.items():
        with open(os.path.join(with_files, name), "w") as f:
            f.write(content)
    merged_files = os.path.join(work, "merged_files")
    run([attend, "merge-lora", "--model", with_files, "--lora", peft, "-o", merged_files])
    for name, content in side.items():
        path = os.path.join(merged_files, name)
        if not os.path.exists(path) or open(path).read() != content:
            fail(f"merge-lora did not carry the base's {name}")
    # So does a fine-tuning run's checkpoint, when it trains with the base's own tokenizer.
    tuned = os.path.join(work, "tuned_files")
    run([attend, "train", "--set", f"train.init_from={with_files}", "--set", "train.lora.r=2", *common,
         "--set", f"data.tokenizer={with_files}", "--set", "train.steps=3", "--set", f"out={tuned}"])
    for name, content in side.items():
        path = os.path.join(tuned, "checkpoint", name)
        if not os.path.exists(path) or open(path).read() != content:
            fail(f"a fine-tuning checkpoint did not carry the base's {name}")

    def perplexity(model, *extra):
        line = evaluate(model, *extra)[0]
        return float(line.split("perplexity")[1].split()[0].strip(",:"))

    # The same sums in another order (W x + s·B(A x) against (W + s·B·A) x): equal to fp32 rounding.
    want = perplexity(f"{lora}/checkpoint")
    for m in (merged, merged_peft):
        got = perplexity(m)
        if abs(got - want) > 1e-3 * want:
            fail(f"{m}: perplexity {got}, the LoRA checkpoint's {want}")
    # Targets that adapt nothing (only gate, on a GELU FFN) or one named twice are refused before anything trains
    # (gate was skipped: a run of zero gradients, and inspect said it was adapted).
    for targets, message in (("gate", "not gated"), ("q,q", "named twice")):
        proc = subprocess.run([attend, "train", "--set", "model.d_model=32", "--set", "model.n_layers=1",
                               "--set", "model.n_heads=4", "--set", "model.max_seq_len=64", "--set", "model.activation=gelu",
                               "--set", "train.lora.r=2", "--set", f"train.lora.targets={targets}", *common,
                               "--set", "train.steps=3", "--set", f"out={os.path.join(work, 'no_gate')}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 0 or message not in proc.stderr:
            fail(f"train.lora.targets={targets} on a GELU model: exit {proc.returncode}, {proc.stderr[-400:]!r}")
    # Beside another target, gate adapts nothing there (PEFT's list semantics), and inspect names only what is adapted.
    gelu = os.path.join(work, "gelu_q_gate")
    run([attend, "train", "--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=4",
         "--set", "model.max_seq_len=64", "--set", "model.activation=gelu", "--set", "train.lora.r=2",
         "--set", "train.lora.targets=q,gate", *common, "--set", "train.steps=3", "--set", f"out={gelu}"])
    inspect = run([attend, "inspect", f"{gelu}/checkpoint", "--summary"])
    if "LoRA r = 2 on q:" not in inspect:
        fail(f"inspect of a GELU model with targets q,gate:\n{inspect}")
    # Fine-tuning a LoRA checkpoint with other adapter settings: the error names each field that differs (it printed
    # r and targets alone, the same on both sides when alpha differed).
    proc = subprocess.run([attend, "train", "--set", f"train.init_from={gelu}/checkpoint", "--set", "train.lora.r=2",
                           "--set", "train.lora.targets=q,gate", "--set", "train.lora.alpha=4", *common,
                           "--set", "train.steps=3", "--set", f"out={gelu}_again"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode == 0 or "alpha 16 against 4" not in proc.stderr or "r 2 against" in proc.stderr:
        fail(f"init_from a LoRA checkpoint with another lora alpha: exit {proc.returncode}, {proc.stderr[-400:]!r}")
    classifier_with_peft(attend, work, text)
    # A second adapter (other targets and rank), for several at once and for the server.
    lora2 = os.path.join(work, "lora2")
    run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", "train.lora.r=2",
         "--set", "train.lora.alpha=4", "--set", "train.lora.targets=q,v,down", "--set", "train.lora.dropout=0.05",
         "--set", "train.lr=2e-2", "--set", "train.seed=5", *common, "--set", f"out={lora2}"])
    peft2 = os.path.join(work, "peft2")
    run([attend, "export", "--model", f"{lora2}/checkpoint", "--format", "peft", "-o", peft2])
    with open(os.path.join(lora2, "run.json")) as f:
        if json.load(f)["train"].get("lora", {}).get("dropout") != 0.05:
            fail("run.json does not keep train.lora")
    with open(os.path.join(peft2, "adapter_config.json")) as f:
        if json.load(f)["lora_dropout"] != 0.05:
            fail("adapter_config.json does not say the adapters' dropout")
    if generate(f"{base}/checkpoint", "--lora", f"{peft}:0") != plain:
        fail("--lora DIR:0 is not the base model")
    if generate(f"{base}/checkpoint", "--lora", peft, "--lora", f"{peft2}:0") != own:
        fail("a second adapter at scale 0 changed the first's tokens")
    serve_batches_adapters(attend, f"{base}/checkpoint", peft, peft2, lora_gguf)

    print(f"lora_cli: greedy tokens with --lora equal the LoRA checkpoint's ({'different from' if plain != own else 'the same as'} "
          f"the base's); eval equal; merge-lora's models evaluate alike; every check passed")


def classifier_with_peft(attend, work, text):
    """eval-classify --lora: a small encoder classifier, its LoRA run (the head trains whole beside the adapters, as
    PEFT's modules_to_save) and its PEFT export: the base with --lora scores as the LoRA checkpoint does."""
    tsv = os.path.join(work, "labels.tsv")
    with open(text) as f, open(tsv, "w") as g:
        for line in f:
            if line.strip():
                g.write(f"{'jury' if 'jury' in line else 'other'}\t{line.strip()}\n")
    tok = os.path.join(work, "wordpiece.json")
    run([attend, "tokenizer", "train", "--kind", "wordpiece", "--vocab-size", "200", "--input", text, "-o", tok])
    model = ["--set", "model.architecture=encoder", "--set", "model.d_model=32", "--set", "model.n_layers=1",
             "--set", "model.n_heads=2", "--set", "model.max_seq_len=32", "--set", "model.n_classes=2"]
    data = ["--set", "data.task=classify", "--set", f"data.train={tsv}", "--set", f"data.tokenizer={tok}",
            "--set", "data.batch_size=8", "--set", "data.seq_len=32", "--set", "train.warmup_steps=2"]
    base, tuned = os.path.join(work, "cls_base"), os.path.join(work, "cls_lora")
    run([attend, "train", *model, *data, "--set", "train.steps=20", "--set", f"out={base}"])
    run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", "train.lora.r=2",
         "--set", "train.lr=1e-2", *data, "--set", "train.steps=10", "--set", f"out={tuned}"])
    peft = os.path.join(work, "cls_peft")
    run([attend, "export", "--model", f"{tuned}/checkpoint", "--format", "peft", "-o", peft])
    score = lambda *args: json.loads(run([attend, "eval-classify", "--data", tsv, "--json", *args]))
    own, adapted, plain = (score("--model", f"{tuned}/checkpoint"), score("--model", f"{base}/checkpoint", "--lora", peft),
                           score("--model", f"{base}/checkpoint"))
    if own != adapted:
        fail(f"eval-classify: the base with --lora scores {adapted}, the LoRA checkpoint {own}")
    if own == plain:
        fail("eval-classify: the LoRA run scores as its base does (the adapters changed nothing)")
    # train.lora.from the classifier's PEFT files (adapters and head) goes on as from its LoRA checkpoint.
    more = ["--set", "train.lora.r=2", "--set", "train.lr=1e-2", *data, "--set", "train.steps=3"]
    on_checkpoint, on_peft = os.path.join(work, "cls_more_checkpoint"), os.path.join(work, "cls_more_peft")
    run([attend, "train", "--set", f"train.init_from={tuned}/checkpoint", *more, "--set", f"out={on_checkpoint}"])
    run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", f"train.lora.from={peft}", *more,
         "--set", f"out={on_peft}"])
    if not losses(on_peft) or losses(on_peft) != losses(on_checkpoint):
        fail(f"train.lora.from a classifier's adapter: losses {losses(on_peft)}, from its checkpoint "
             f"{losses(on_checkpoint)}")
    # eval-seq2seq --lora: a small encoder-decoder learning to say a line's first three words backwards.
    pairs = os.path.join(work, "pairs.tsv")
    with open(text) as f, open(pairs, "w") as g:
        for line in f:
            words = line.split()[:3]
            if words:
                g.write(" ".join(words) + "\t" + " ".join(reversed(words)) + "\n")
    model = ["--set", "model.architecture=encoder-decoder", "--set", "model.d_model=32", "--set", "model.n_layers=1",
             "--set", "model.n_heads=2", "--set", "model.max_seq_len=32"]
    data = ["--set", "data.task=seq2seq", "--set", f"data.train={pairs}", "--set", f"data.tokenizer={tok}",
            "--set", "data.batch_size=8", "--set", "data.seq_len=16", "--set", "data.max_target_len=16",
            "--set", "train.warmup_steps=2"]
    base, tuned, peft = (os.path.join(work, name) for name in ("s2s_base", "s2s_lora", "s2s_peft"))
    run([attend, "train", *model, *data, "--set", "train.steps=300", "--set", "train.lr=3e-3", "--set", f"out={base}"])
    run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", "train.lora.r=2",
         "--set", "train.lr=3e-2", *data, "--set", "train.steps=30", "--set", f"out={tuned}"])
    run([attend, "export", "--model", f"{tuned}/checkpoint", "--format", "peft", "-o", peft])
    rates = lambda *args: json.loads(run([attend, "eval-seq2seq", "--data", pairs, "--limit", "200", "--json", *args]))
    own, adapted = rates("--model", f"{tuned}/checkpoint"), rates("--model", f"{base}/checkpoint", "--lora", peft)
    if own != adapted:
        fail(f"eval-seq2seq: the base with --lora scores {adapted}, the LoRA checkpoint {own}")
    if own == rates("--model", f"{base}/checkpoint"):
        fail("eval-seq2seq: the LoRA run scores as its base does (the adapters changed nothing)")


def serve_batches_adapters(attend, model, peft, peft2, gguf):
    """`attend serve --lora one=... --lora two=...`: /v1/models lists both; requests for one, two, the base and
    no model named, sent at once (decoded in the same steps), get the log-probabilities each gets alone."""
    server, port = tiny_runs.start_serve(fail, attend, "--model", model, "--alias", "base", "--parallel", "4",
                                         "--weights", "f32", "--lora", f"one={peft}", "--lora", f"two={peft2}:1.5")
    try:
        url = f"http://127.0.0.1:{port}"

        def get(path):
            with urllib.request.urlopen(url + path, timeout=30) as r:
                return json.loads(r.read())

        tiny_runs.wait_ready(fail, url, server)
        ids = sorted(m["id"] for m in get("/v1/models")["data"])
        if ids != ["base", "one", "two"]:
            fail(f"/v1/models lists {ids}, expected base, one, two")

        def complete(model, lora=None):
            body = {"prompt": "the jury said", "max_tokens": 10, "temperature": 0, "logprobs": 1}
            if model:
                body["model"] = model
            if lora is not None:
                body["lora"] = lora
            req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                answer = json.loads(r.read())
            if model and answer["model"] != model:
                fail(f"a request for '{model}' was answered as '{answer['model']}'")
            return answer["choices"][0]["logprobs"]["token_logprobs"], answer["choices"][0]["text"]

        def shared_steps():  # steps that decoded two sequences or more (/metrics' histogram)
            with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
                text = r.read().decode()
            count = int(re.search(r"^attend_batch_sequences_count (\d+)$", text, re.M).group(1))
            single = int(re.search(r'^attend_batch_sequences_bucket\{le="1"\} (\d+)$', text, re.M).group(1))
            return count - single

        models = ["one", "two", "base", None]
        alone = [complete(m) for m in models]
        served = dict(zip(models, alone))
        if shared_steps() != 0:
            fail("serve: requests sent one at a time shared a step")
        with concurrent.futures.ThreadPoolExecutor(len(models)) as pool:
            together = list(pool.map(complete, models * 2))
        if shared_steps() == 0:
            fail("serve: the requests for different adapters never shared a step")
        for i, m in enumerate(models * 2):
            if together[i] != alone[i % len(models)]:
                fail(f"serve: the request for {m} batched with the others got {together[i]}, alone {alone[i % 4]}")
        print(f"lora_cli: serve: {[a[1] for a in alone]}")
        if len({json.dumps(a) for a in alone}) != len(models):
            fail(f"serve: the four models (one, two, base, both) should differ; got {alone}")
        # llama-server's per-request "lora" ({"id": index among --lora, "scale"}; those not listed off): at the
        # scales they were loaded with, the same as naming the adapter; at another, decoded among the others as alone.
        listed = get("/lora-adapters")
        if [(a["id"], a["name"], a["scale"]) for a in listed] != [(0, "one", 1.0), (1, "two", 1.5)] or \
                listed[1]["path"] != peft2:
            fail(f"/lora-adapters lists {listed}")
        by_lora = {"one": [{"id": 0, "scale": 1}], "two": [{"id": 1, "scale": 1.5}], "base": [],
                   None: [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 1.5}]}
        for m, lora in by_lora.items():
            if complete("base" if m else None, lora) != alone[models.index(m)]:
                fail(f"serve: 'lora': {lora} is not the same as the model {m}")
        if complete(None, [{"id": 0, "scale": 0}, {"id": 1, "scale": 1.5}]) != alone[models.index("two")]:
            fail("serve: 'lora' with an adapter at scale 0 still ran it")
        softer = [{"id": 1, "scale": 0.75}]
        scaled = complete("base", softer)
        if scaled in (alone[models.index("two")], alone[models.index("base")]):
            fail(f"serve: 'lora' at scale 0.75 gave the same as at 1.5 or without: {scaled}")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            mixed = list(pool.map(lambda a: complete(*a),
                                  [("base", softer), ("two", None), ("base", softer), (None, None)]))
        if mixed != [scaled, alone[models.index("two")], scaled, alone[models.index(None)]]:
            fail(f"serve: requests at other adapter scales batched together got {mixed}")

        def refused(body):
            req = urllib.request.Request(url + "/v1/completions", data=json.dumps({"prompt": "a", **body}).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=30)
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())["error"]["message"]
            fail(f"serve: {body} was answered")

        for body, words in [({"lora": [{"id": 2, "scale": 1}]}, "has 2"), ({"lora": {"id": 0}}, "expected a list"),
                            ({"lora": [{"id": 0}]}, "its 'scale' must be"),
                            ({"lora": [{"id": None, "scale": 1}]}, "index"),
                            ({"lora": [{"id": 0, "scale": 1}, {"id": 0, "scale": 2}]}, "twice"),
                            ({"model": "one", "lora": []}, "name the model 'base'")]:
            code, message = refused(body)
            if code != 400 or words not in message:
                fail(f"serve: {body} got {code} {message!r}, expected 400 saying {words!r}")

        def embed(model, lora=None):
            body = {"model": model, "input": "the jury"}
            if lora is not None:
                body["lora"] = lora
            req = urllib.request.Request(url + "/v1/embeddings", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read())["data"][0]["embedding"]

        if embed("one") == embed("base") or embed("one") != embed("one"):
            fail("serve: /v1/embeddings does not run with the adapter the request names")
        if embed("base", [{"id": 0, "scale": 1}]) != embed("one") or embed("base", []) != embed("base"):
            fail("serve: /v1/embeddings with 'lora' differs from naming the adapter")
        half_embed = embed("base", [{"id": 0, "scale": 0.5}])  # against the adapter loaded at 0.5, below
        half = complete("base", [{"id": 0, "scale": 0.5}])
        if half_embed in (embed("one"), embed("base")):
            fail("serve: /v1/embeddings with an adapter at scale 0.5 is the same as at 1 or without")

        # llama-server's POST /lora-adapters: the scales of requests that name neither adapters nor a model (those
        # not in the body: 0); GET lists them; a request naming a model or listing its own adapters is as before.
        def post_adapters(body):
            req = urllib.request.Request(url + "/lora-adapters", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        if post_adapters([{"id": 1, "scale": 0.75}]) != (200, {"success": True}):
            fail("serve: POST /lora-adapters was not answered {'success': true}")
        if [a["scale"] for a in get("/lora-adapters")] != [0.0, 0.75]:
            fail(f"serve: after POST /lora-adapters, GET lists {get('/lora-adapters')}")
        if complete(None) != scaled:
            fail("serve: a request naming no model did not run at the scales POST /lora-adapters set")
        if [complete(m) for m in ("one", "two", "base")] != [alone[models.index(m)] for m in ("one", "two", "base")]:
            fail("serve: after POST /lora-adapters, requests naming a model no longer get that model")
        if complete("base", [{"id": 0, "scale": 1}]) != alone[models.index("one")]:
            fail("serve: a request's own 'lora' did not take the place of the scales POST /lora-adapters set")
        for body, words in [({"id": 0, "scale": 1}, "expected a list"), ([{"id": 2, "scale": 1}], "has 2"),
                            ([{"id": 0}], "its 'scale' must be")]:
            code, answer = post_adapters(body)
            if code != 400 or words not in answer["error"]["message"]:
                fail(f"serve: POST /lora-adapters {body} got {code} {answer}, expected 400 saying {words!r}")
        if [a["scale"] for a in get("/lora-adapters")] != [0.0, 0.75]:
            fail("serve: a refused POST /lora-adapters changed the scales")
        post_adapters([{"id": 0, "scale": 1.0}, {"id": 1, "scale": 1.5}])
        if complete(None) != alone[models.index(None)]:
            fail("serve: the scales POSTed back as loaded do not give the first answers again")
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps({"model": "three", "prompt": "a"}).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=30)
            fail("serve: a request for an unknown adapter was answered")
        except urllib.error.HTTPError as e:
            if e.code != 404:
                fail(f"serve: an unknown adapter got {e.code}, expected 404")
    finally:
        server.terminate()
        server.wait(timeout=30)
    # llama-server's --lora-init-without-apply: the adapters listed at scale 0 and requests naming no model run
    # without them; one naming an adapter runs with it at the scale it was loaded with (0.5 here): the same
    # completion and embedding, bit for bit, as the requests above that asked for the adapter at 0.5.
    # The GGUF LoRA file of `peft`'s adapters beside it, named after the file: the same greedy text as `one` at 1.
    server, port = tiny_runs.start_serve(fail, attend, "--model", model, "--alias", "base", "--weights", "f32",
                                         "--lora", f"one={peft}:0.5", "--lora", gguf, "--lora-init-without-apply")
    try:
        url = f"http://127.0.0.1:{port}"
        tiny_runs.wait_ready(fail, url, server)
        with urllib.request.urlopen(url + "/lora-adapters", timeout=30) as r:
            listed = [(a["name"], a["scale"]) for a in json.loads(r.read())]
            if listed != [("one", 0.0), ("lora", 0.0)]:
                fail(f"serve --lora-init-without-apply with a GGUF LoRA: GET /lora-adapters lists {listed}")
        for name, want in ((None, served["base"]), ("one", half), ("lora", served["one"])):
            body = {"prompt": "the jury said", "max_tokens": 10, "temperature": 0, "logprobs": 1}
            if name:
                body["model"] = name
            req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                choice = json.loads(r.read())["choices"][0]
            if name == "lora":  # alpha / r through the file: the same text, log-probabilities within roundings
                if choice["text"] != want[1] or max(abs(x - y) for x, y in zip(choice["logprobs"]["token_logprobs"],
                                                                          want[0])) > 1e-4:
                    fail(f"serve: the GGUF LoRA's request got {choice['text']!r}, the PEFT adapter's {want[1]!r}")
            elif (choice["logprobs"]["token_logprobs"], choice["text"]) != want:
                fail(f"serve --lora-init-without-apply: the request for {name} got {choice['text']!r}")
        body = json.dumps({"model": "one", "input": "the jury"}).encode()
        req = urllib.request.Request(url + "/v1/embeddings", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            if json.loads(r.read())["data"][0]["embedding"] != half_embed:
                fail("serve: an embedding with the adapter loaded at 0.5 differs from one asking for it at 0.5")
    finally:
        server.terminate()
        server.wait(timeout=30)
    # An adapter that cannot be loaded: the server says why and exits 1 (not a server answering 503 forever).
    missing = os.path.join(os.path.dirname(peft), "no_such_adapter")
    try:
        bad = subprocess.run([attend, "serve", "--model", model, "--port", "0", "--lora", f"one={missing}"],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        fail("serve: with an adapter that does not exist it kept serving")
    if bad.returncode != 1 or "loading the model failed" not in bad.stderr or missing not in bad.stderr:
        fail(f"serve: a missing adapter exited {bad.returncode}: {bad.stderr[-500:]}")


if __name__ == "__main__":
    main()
