#!/usr/bin/env python3
"""`attend generate` as a user streams it: with a stop string, the streamed text is exactly the final text (it
printed the start of a stop string that later ids completed and cut: " setting" seven times, then a final text of
four); --temperature 0 is greedy decoding; a mistyped command or option names the one meant.

  python3 tests/generate_cli.py --attend build/attend --work /tmp/attend_generate_cli

Exits 0 when every check passed, 1 with the first failure.
"""
import json
import os
import re
import subprocess

import tiny_runs

fail, run = tiny_runs.checks("generate_cli")


def main():
    attend, work = tiny_runs.paths(__doc__)
    _, common = tiny_runs.corpus(run, attend, work, documents=False)
    out = os.path.join(work, "run")
    trained = subprocess.run([attend, "train", "--set", "model.d_model=32", "--set", "model.n_layers=1", "--set",
                              "model.n_heads=2", "--set", "model.max_seq_len=64", *common, "--set", "train.steps=30",
                              "--set", f"out={out}"], capture_output=True, text=True)
    if trained.returncode != 0:
        fail(f"attend train exited {trained.returncode}: {trained.stderr[-2000:]}")
    # The corpus has no blank lines: one document, none held out. Training says so and reports no validation loss
    # (it reported nan without a word of why).
    if "no validation text: none of the 1 document" not in trained.stderr or re.search(r"\bnan\b", trained.stdout + trained.stderr):
        fail(f"one document: no word of the missing validation text, or a nan: {trained.stderr[-1500:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        if any("val_loss" in json.loads(line) for line in f):
            fail("one document: metrics.jsonl has a validation loss")
    model = os.path.join(out, "checkpoint")
    base = [attend, "generate", "--model", model, "--prompt", "the jury", "--max-new-tokens", "40"]
    whole = json.loads(run(base + ["--greedy", "--json"]))["text"]
    if len(whole) < 40:
        fail(f"the greedy text is too short to cut stop strings from: {whole!r}")

    # Stop strings of six characters from across the text, most of them spanning tokens: the stream shows the text
    # before the first occurrence and nothing of the stop string.
    cut_in_stream = 0
    for start in range(4, len(whole) - 6, max(1, (len(whole) - 10) // 8)):
        stop = whole[start:start + 6]
        expected = whole[:whole.find(stop)]
        streamed = run(base + ["--greedy", "--stop", stop])
        if streamed != expected + "\n":
            fail(f"--stop {stop!r}: streamed {streamed!r}, the text is {expected!r}")
        final = json.loads(run(base + ["--greedy", "--stop", stop, "--json"]))["text"]
        if final != expected:
            fail(f"--stop {stop!r}: --json gave {final!r}, expected {expected!r}")
        cut_in_stream += 1
    if cut_in_stream < 4:
        fail(f"only {cut_in_stream} stop strings tried")

    # --temperature 0 is the argmax, as OpenAI's API and llama.cpp take it.
    zero = json.loads(run(base + ["--temperature", "0", "--json"]))["text"]
    if zero != whole:
        fail(f"--temperature 0 gave {zero!r}, --greedy {whole!r}")

    # Mistakes name what was meant, and fail.
    for cmd, wanted in [([attend, "generat", "--model", model], "did you mean 'generate'"),
                        (base + ["--max-new-token", "3"], "did you mean --max-new-tokens"),
                        (base + ["--beam", "2", "--stop", "x"], "--beam excludes --stop"),
                        (base + ["--n-best", "2"], "--n-best requires --beam"),
                        (base + ["--beam", "0"], "--beam: expected a number of at least 1, got '0'")]:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 0 or wanted not in proc.stderr:
            fail(f"{' '.join(cmd[1:])}: exit {proc.returncode}, stderr {proc.stderr!r}; expected {wanted!r}")
    print(f"generate_cli: {cut_in_stream} stop strings streamed as cut; temperature 0 greedy; mistakes named")


if __name__ == "__main__":
    main()
