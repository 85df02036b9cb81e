#!/usr/bin/env python3
"""LoRA from the command line: a Llama-style base trained, LoRA adapters trained on it (train.init_from with
model.lora_r), exported as PEFT's files, and run on the base with --lora: the same greedy tokens and the same
evaluation loss as the LoRA run's own checkpoint.

  python3 tests/lora_cli.py --attend build/attend --work /tmp/attend_lora_cli

Exits 0 when every check passed, 1 with the first failure.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys


def fail(message):
    print(f"lora_cli: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attend", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    attend, work = os.path.abspath(args.attend), os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    words = ("the jury said it did find that many of the new laws were not clear and the city was to pay "
             "for its own work on a plan which would take place in two years if they could get money").split()
    rng = random.Random(0)
    text = os.path.join(work, "corpus.txt")
    with open(text, "w") as f:
        for i in range(2000):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(5, 14))) + "\n")
            if i % 5 == 4:
                f.write("\n")
    tok = os.path.join(work, "tokenizer.json")
    run([attend, "tokenizer", "train", "--kind", "bpe", "--vocab-size", "300", "--input", text, "-o", tok])
    common = ["--set", f"data.train={text}", "--set", f"data.tokenizer={tok}", "--set", "data.batch_size=4",
              "--set", "data.seq_len=32", "--set", "data.max_valid_batches=2", "--set", "train.eval_every=0",
              "--set", "train.steps=20", "--set", "train.warmup_steps=2"]
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

    def generate(model, *extra):
        result = run([attend, "generate", "--model", model, "--prompt", "the jury said", "--max-new-tokens", "12",
                      "--greedy", "--json", *extra])
        return json.loads(result)["ids"]

    own = generate(f"{lora}/checkpoint")
    adapted = generate(f"{base}/checkpoint", "--lora", peft)
    plain = generate(f"{base}/checkpoint")
    if own != adapted:
        fail(f"the base with --lora generates {adapted}, the LoRA checkpoint {own}")

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

    def perplexity(model, *extra):
        line = evaluate(model, *extra)[0]
        return float(line.split("perplexity")[1].split()[0].strip(",:"))

    # The same sums in another order (W x + s·B(A x) against (W + s·B·A) x): equal to fp32 rounding.
    want = perplexity(f"{lora}/checkpoint")
    for m in (merged, merged_peft):
        got = perplexity(m)
        if abs(got - want) > 1e-3 * want:
            fail(f"{m}: perplexity {got}, the LoRA checkpoint's {want}")
    print(f"lora_cli: greedy tokens with --lora equal the LoRA checkpoint's ({'different from' if plain != own else 'the same as'} "
          f"the base's); eval equal; merge-lora's models evaluate alike; every check passed")


if __name__ == "__main__":
    main()
