"""What the command-line tests (lora_cli.py, llama_lora.py, generate_cli.py, export_cli.py, serve_load_interrupt.py,
gguf_weights_cli.py) share: their paths from the command line, failing with the script's name, running a command
that must succeed, starting `attend serve`, and a fresh work directory with a tiny corpus of Brown-like words, its
BPE tokenizer and the `attend train` options for short runs on it."""
import argparse
import os
import random
import re
import shutil
import struct
import json
import subprocess
import sys
import time
import urllib.request


def paths(doc, *names):
    """The command line's --attend, --work and each of `names` (--data, ...), all required, as absolute paths, in
    that order; `doc` is its help."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("attend", "work", *names):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    return [os.path.abspath(getattr(args, name)) for name in ("attend", "work", *names)]


def checks(name):
    """fail(message) and run(cmd) for the script `name`: run returns stdout, or fails with the command's stderr."""
    def fail(message):
        print(f"{name}: FAILED: {message}", file=sys.stderr)
        sys.exit(1)

    def run(cmd):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            fail(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
        return proc.stdout

    return fail, run


def wait_ready(fail, url, server=None, seconds=30):
    """Waits for the server at `url` to say its model is loaded (/health "ok"); fails after `seconds`, or at once when
    `server` (its process) exits first."""
    for _ in range(seconds * 10):
        if server is not None and server.poll() is not None:
            fail(f"the server at {url} exited with {server.returncode}:\n{server.stderr.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if json.loads(r.read()).get("status") == "ok":
                    return
        except Exception:
            pass
        time.sleep(0.1)
    fail(f"{url} did not load its model in {seconds} s")


def start_serve(fail, attend, *args):
    """`attend serve ARGS --port 0` started, its stdout discarded: returns the process and the port its stderr says it
    listens on (read up to that line; the rest is left in the process's stderr), or fails when it exits first."""
    server = subprocess.Popen([attend, "serve", *args, "--port", "0"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    for line in server.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return server, int(m.group(1))
    fail(f"attend serve did not say where it listens (exit {server.wait()})")


def corpus(run, attend, work, documents):
    """Empties `work` and writes corpus.txt (2,000 lines; with `documents`, a blank line after every fifth) and its
    tokenizer.json (BPE, 300 tokens). Returns the text's path and the train options that read them (4 sequences
    of 32 tokens a step, no evaluation during training)."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    words = ("the jury said it did find that many of the new laws were not clear and the city was to pay "
             "for its own work on a plan which would take place in two years if they could get money").split()
    rng = random.Random(0)
    text = os.path.join(work, "corpus.txt")
    with open(text, "w") as f:
        for i in range(2000):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(5, 14))) + "\n")
            if documents and i % 5 == 4:
                f.write("\n")
    tok = os.path.join(work, "tokenizer.json")
    run([attend, "tokenizer", "train", "--kind", "bpe", "--vocab-size", "300", "--input", text, "-o", tok])
    options = ["--set", f"data.train={text}", "--set", f"data.tokenizer={tok}", "--set", "data.batch_size=4",
               "--set", "data.seq_len=32", "--set", "data.max_valid_batches=2", "--set", "train.eval_every=0",
               "--set", "train.warmup_steps=2"]
    return text, options


def cut_peft_adapter(peft, cut):
    """Writes into `cut` the PEFT adapter of a two-block Llama-layout model (r = 4, v_proj and o_proj among its
    targets; tests/lora_cli.py's and llama_lora.py's) cut to ranks module by module: block 1 alone
    (layers_to_transform), v_proj at rank 2 of 4 (rank_pattern: A's first two rows, B's first two columns) and
    o_proj at alpha 3 (alpha_pattern)."""
    os.makedirs(cut, exist_ok=True)
    with open(os.path.join(peft, "adapter_config.json")) as f:
        config = json.load(f)
    config.update(layers_to_transform=[1], layers_pattern="layers", rank_pattern={"v_proj": 2},
                  alpha_pattern={"o_proj": 3.0})
    with open(os.path.join(cut, "adapter_config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(peft, "adapter_model.safetensors"), "rb") as f:
        raw = f.read()
    size = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + size]), raw[8 + size:]
    kept, blob = {}, b""
    for name, info in header.items():
        if name == "__metadata__" or ".layers.0." in name:
            continue
        begin, end = info["data_offsets"]
        shape, values = list(info["shape"]), data[begin:end]
        if ".v_proj." in name:
            if ".lora_A." in name:
                values, shape[0] = values[:2 * shape[1] * 4], 2
            else:
                values = b"".join(values[row * shape[1] * 4:row * shape[1] * 4 + 8] for row in range(shape[0]))
                shape[1] = 2
        kept[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(values)]}
        blob += values
    text = json.dumps(kept).encode()
    with open(os.path.join(cut, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)
