#!/usr/bin/env python3
"""Kills `attend train` with SIGKILL at random moments and resumes it each time; then stops it with Ctrl-C and SIGTERM.

A tiny GPT (with dropout, so the random stream must continue exactly too) trains on a generated corpus with a
checkpoint after every step, once straight through (the reference) and then again with kill -9 at a random
moment of each attempt, resuming after each kill until the run completes. After every kill the checkpoint
left behind must load (`attend inspect`) and the next attempt must resume from it; each completed run must
end with the reference's weights and optimiser state byte for byte and the same metrics step for step.

CTest runs a few kills (tests/CMakeLists.txt); the record in docs/ARCHITECTURE.md is of

    python3 tests/kill_resume.py --attend build/attend --work /tmp/attend_kill --kills 50

Exits 0 when every check passed, 1 with the first failure otherwise.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time


EVAL_EVERY = 5  # the runs' validation interval


def fail(message):
    print(f"kill_resume: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def corpus(path, lines=3000):
    # Sentences of a small vocabulary in a fixed pseudo-random order, paragraphs of five lines.
    words = ("the jury said it did find that many of the new laws were not clear and the city was to pay "
             "for its own work on a plan which would take place in two years if they could get money").split()
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(lines):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(5, 14))) + "\n")
            if i % 5 == 4:
                f.write("\n")


def train_command(args, tokenizer, text, out, resume):
    cmd = [args.attend, "train",
           "--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "model.n_heads=2",
           "--set", "model.max_seq_len=32", "--set", "model.residual_dropout=0.1",
           "--set", "model.attention_dropout=0.1", "--set", f"data.train={text}", "--set", f"data.tokenizer={tokenizer}",
           "--set", "data.batch_size=4", "--set", "data.seq_len=32", "--set", "data.max_valid_batches=2",
           "--set", "train.warmup_steps=2", "--set", f"train.eval_every={EVAL_EVERY}", "--set", "train.checkpoint_every=1",
           "--set", f"train.steps={args.steps}", "--set", f"out={out}"]
    return cmd + (["--resume"] if resume else [])


def check_signal_threads(pid, what):
    # No SIGINT or SIGTERM handler may run on a thread that computes: oneDNN's JIT GEMM kernels point rsp into the
    # heap while they run, and a handler's frame there corrupts it (oneDNN issue #4845; "corrupted size vs.
    # prev_size" once in CI). So the process catches neither signal, and every thread blocks both but the one that
    # waits for them (sigwait unblocks them while it waits).
    both = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    field = lambda text, name: int(re.search(name + r":\s*([0-9a-f]+)", text).group(1), 16)
    if field(open(f"/proc/{pid}/status").read(), "SigCgt") & both:
        fail(f"{what}: a handler catches SIGINT or SIGTERM, which can run on a computing thread")
    tasks = os.listdir(f"/proc/{pid}/task")
    waiting = []
    for task in tasks:
        try:
            text = open(f"/proc/{pid}/task/{task}/status").read()
        except FileNotFoundError:  # a thread that just ended
            continue
        if field(text, "SigBlk") & both != both:
            waiting.append(task)
    if len(tasks) < 2 or len(waiting) != 1:
        fail(f"{what}: {len(waiting)} of {len(tasks)} threads take SIGINT and SIGTERM; one alone should")


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def metrics(out):
    # Every metric but the timings, step by step.
    rows = []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            rows.append({k: v for k, v in j.items() if k not in ("tokens_per_s", "elapsed_s")})
    return rows


def final_state(out):
    ckpt = os.path.join(out, "checkpoint")
    return {"model": read_bytes(os.path.join(ckpt, "model.safetensors")),
            "optimizer": read_bytes(os.path.join(ckpt, "optimizer.safetensors")),
            "step": json.load(open(os.path.join(ckpt, "trainer.json")))["step"],
            "metrics": metrics(out)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attend", required=True, help="the attend binary")
    p.add_argument("--work", required=True, help="a scratch directory (emptied first)")
    p.add_argument("--kills", type=int, default=50, help="SIGKILLs in all")
    p.add_argument("--steps", type=int, default=40, help="steps of each run")
    p.add_argument("--seed", type=int, default=1, help="seeds the kill moments")
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    text, tokenizer = os.path.join(args.work, "corpus.txt"), os.path.join(args.work, "tokenizer.json")
    corpus(text)
    subprocess.run([args.attend, "tokenizer", "train", "--kind", "wordpiece", "--vocab-size", "200", "--input", text,
                    "-o", tokenizer], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    reference = os.path.join(args.work, "reference")
    start = time.monotonic()
    subprocess.run(train_command(args, tokenizer, text, reference, False), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    duration = time.monotonic() - start
    want = final_state(reference)
    if want["step"] != args.steps or len(want["metrics"]) != args.steps:
        fail(f"the reference run ended at step {want['step']} with {len(want['metrics'])} metrics lines")

    rng = random.Random(args.seed)
    kills = rounds = 0
    seen = {"before the first checkpoint": 0, "with a checkpoint swap under way": 0, "with a cut metrics line": 0,
            "at a step after the checkpoint's": 0}
    while kills < args.kills:
        rounds += 1
        out = os.path.join(args.work, f"run{rounds}")
        shutil.rmtree(out, ignore_errors=True)
        while True:
            has_checkpoint = any(os.path.exists(os.path.join(out, d, "trainer.json"))
                                 for d in ("checkpoint", "checkpoint.old"))
            log = open(os.path.join(args.work, "attempt.log"), "w")
            proc = subprocess.Popen(train_command(args, tokenizer, text, out, has_checkpoint), stdout=log, stderr=log)
            killed = False
            if kills < args.kills:
                try:
                    proc.wait(timeout=rng.uniform(0.0, duration))
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                    killed = True
            rc = proc.wait()
            log.close()
            if not killed:
                if rc != 0:
                    fail(f"round {rounds}: the attempt after {kills} kills exited {rc}: "
                         + open(os.path.join(args.work, "attempt.log")).read()[-2000:])
                break
            kills += 1
            # What the kill left: a checkpoint that loads (the trainer falls back to checkpoint.old when a swap
            # was cut between its two renames).
            ckpt = os.path.join(out, "checkpoint")
            if not os.path.exists(ckpt) and os.path.exists(os.path.join(out, "checkpoint.old")):
                ckpt = os.path.join(out, "checkpoint.old")
                seen["with a checkpoint swap under way"] += 1
            elif os.path.exists(os.path.join(out, "checkpoint.tmp")) or os.path.exists(os.path.join(out, "checkpoint.old")):
                seen["with a checkpoint swap under way"] += 1
            if not os.path.exists(os.path.join(ckpt, "trainer.json")):
                seen["before the first checkpoint"] += 1
                continue
            inspect = subprocess.run([args.attend, "inspect", ckpt], capture_output=True, text=True)
            if inspect.returncode != 0:
                fail(f"kill {kills}: the checkpoint left behind does not load: {inspect.stderr.strip()}")
            step = json.load(open(os.path.join(ckpt, "trainer.json")))["step"]
            path = os.path.join(out, "metrics.jsonl")
            if os.path.exists(path):
                data = read_bytes(path)
                if data and not data.endswith(b"\n"):
                    seen["with a cut metrics line"] += 1
                lines = [line for line in data.split(b"\n") if line.strip()]
                if lines and data.endswith(b"\n") and json.loads(lines[-1])["step"] > step:
                    seen["at a step after the checkpoint's"] += 1
        got = final_state(out)
        for key in ("step", "metrics", "model", "optimizer"):
            if got[key] != want[key]:
                fail(f"round {rounds} (after {kills} kills in all): the resumed run's {key} differs from the reference")
        print(f"round {rounds}: completed after {kills} kills in all; weights, optimiser state and metrics equal the reference")
    # Ctrl-C and SIGTERM: training stops after the step under way, writes its checkpoint and exits 128 + the signal's
    # number, as an interrupted program does (so that a script does not go on as if the run were complete); the run
    # then resumes to the reference's bytes.
    for sig in (signal.SIGINT, signal.SIGTERM):
        out = os.path.join(args.work, f"stopped_{sig.name}")
        shutil.rmtree(out, ignore_errors=True)
        log_path = os.path.join(args.work, "attempt.log")
        metrics_path = os.path.join(out, "metrics.jsonl")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(train_command(args, tokenizer, text, out, False), stdout=log, stderr=log)
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:  # two steps done: the handler is in place
                if os.path.exists(metrics_path) and read_bytes(metrics_path).count(b"\n") >= 2:
                    break
                time.sleep(0.005)
            if proc.poll() is None:
                check_signal_threads(proc.pid, f"{sig.name}: attend train")
            proc.send_signal(sig)
            rc = proc.wait()
        said = open(log_path).read()
        if rc != 128 + sig.value:
            fail(f"{sig.name}: attend train exited {rc}, expected {128 + sig.value}: {said[-2000:]}")
        if "stopping after this step" not in said or "interrupted: checkpoint written at step" not in said:
            fail(f"{sig.name}: no word of the checkpoint written: {said[-2000:]}")
        stopped_at = int(said.split("interrupted: checkpoint written at step")[1].split()[0])
        subprocess.run(train_command(args, tokenizer, text, out, True), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        got = final_state(out)
        # The step it stopped at also has a validation loss (a stop evaluates, as the run's end does); else the same.
        for row in got["metrics"]:
            if row["step"] == stopped_at and stopped_at % EVAL_EVERY != 0:
                row.pop("val_loss", None), row.pop("val_loss_per_byte", None)
        for key in ("step", "metrics", "model", "optimizer"):
            if got[key] != want[key]:
                fail(f"{sig.name}: the run resumed after it differs from the reference in its {key}")
        print(f"{sig.name}: exited {rc} with its checkpoint; resumed to the reference's bytes")
    print(f"kill_resume: {kills} kills in {rounds} runs of {args.steps} steps (reference run {duration:.2f} s); every "
          f"checkpoint loaded and every run resumed to the reference's bytes. Kills "
          + ", ".join(f"{n} {what}" for what, n in seen.items()))


if __name__ == "__main__":
    main()
