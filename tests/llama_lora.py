#!/usr/bin/env python3
"""Attend's GGUF LoRA files in llama.cpp: for a llama-layout, a gpt2-layout (gpt2's fused attn_qkv takes the q and
v adapters as one adapter of rank 2r) and a qwen2-layout model (q and k rows in Hugging Face's order), a base
trained, LoRA adapters trained on it, the base exported with `attend export --format gguf` and the adapters with
`--format gguf-lora`; llama.cpp's llama-server loads the base with --lora and generates greedily from token ids:
the tokens Attend generates from the base with the PEFT adapter (--lora), and, with the adapter's scale set to 0
in the request, the base's own tokens.

  python3 tests/llama_lora.py --attend build/attend --llama-bin /path/to/llama.cpp/build/bin --work /tmp/w

Without --llama-bin (or ATTEND_LLAMA_BIN) it exits 77: CTest's "skipped". Exits 0 when every check passed.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import urllib.request

import tiny_runs

fail, run = tiny_runs.checks("llama_lora")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_tokens(llama_bin, base, adapter, prompts, n):
    """llama-server's greedy continuations of each prompt (ids), with the adapter at scale 1 and at 0."""
    port = free_port()
    server = subprocess.Popen([os.path.join(llama_bin, "llama-server"), "-m", base, "--lora", adapter, "--port",
                               str(port), "--host", "127.0.0.1", "-t", "2", "-c", "64", "-np", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        tiny_runs.wait_ready(fail, url, server, seconds=60)
        out = {}
        for scale in (1.0, 0.0):
            for prompt in prompts:
                body = {"prompt": prompt, "n_predict": n, "temperature": 0, "top_k": 1, "cache_prompt": False,
                        "return_tokens": True, "lora": [{"id": 0, "scale": scale}]}
                req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as r:
                    out[(scale, tuple(prompt))] = json.loads(r.read())["tokens"]
        return out
    finally:
        server.terminate()
        server.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attend", required=True)
    parser.add_argument("--llama-bin", default="")
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    args.llama_bin = args.llama_bin or os.environ.get("ATTEND_LLAMA_BIN", "")
    if not args.llama_bin or not os.path.exists(os.path.join(args.llama_bin, "llama-server")):
        print("llama_lora: no llama.cpp build (give --llama-bin or ATTEND_LLAMA_BIN): skipped")
        sys.exit(77)
    attend, work = os.path.abspath(args.attend), os.path.abspath(args.work)
    _, common = tiny_runs.corpus(run, attend, work, documents=False)
    layouts = {
        "llama": ["--set", "model.position=rope", "--set", "model.norm=rmsnorm", "--set", "model.activation=swiglu",
                  "--set", "model.bias=false", "--set", "model.n_kv_heads=2"],
        "gpt2": ["--set", "model.position=learned", "--set", "model.norm=layernorm",
                 "--set", "model.activation=gelu_tanh", "--set", "model.bias=true"],
        # qwen2 (q, k and v biases): its q and k rows stay in Hugging Face's halves in the file, as B's rows must
        "qwen2": ["--set", "model.position=rope", "--set", "model.norm=rmsnorm", "--set", "model.activation=swiglu",
                  "--set", "model.bias=false", "--set", "model.n_kv_heads=2", "--set", "model.qkv_bias=true"],
    }
    prompts = [[5, 17, 40], [100, 3, 9, 12, 60]]
    n = 16
    for layout, options in layouts.items():
        base, lora, peft = (os.path.join(work, f"{layout}-{k}") for k in ("base", "lora", "peft"))
        run([attend, "train", "--set", "model.d_model=64", "--set", "model.n_layers=2", "--set", "model.n_heads=4",
             "--set", "model.max_seq_len=64", *options, *common, "--set", "train.steps=400", "--set", "train.lr=3e-3", "--set", f"out={base}"])
        run([attend, "train", "--set", f"train.init_from={base}/checkpoint", "--set", "model.lora_r=4",
             "--set", "model.lora_alpha=8", "--set", "model.lora_targets=q,v,o,up,down", "--set", "train.lr=2e-2",
             *common, "--set", "train.steps=200", "--set", f"out={lora}"])
        base_gguf, lora_gguf = os.path.join(work, f"{layout}.gguf"), os.path.join(work, f"{layout}-lora.gguf")
        run([attend, "export", "--model", f"{base}/checkpoint", "--format", "gguf", "--type", "f32", "-o", base_gguf])
        run([attend, "export", "--model", f"{lora}/checkpoint", "--format", "gguf-lora", "-o", lora_gguf])
        if layout == "llama":  # the same file from the PEFT files on the base
            run([attend, "export", "--model", f"{lora}/checkpoint", "--format", "peft", "-o", peft])
            from_peft = os.path.join(work, "llama-lora-from-peft.gguf")
            run([attend, "export", "--model", f"{base}/checkpoint", "--lora", peft, "--format", "gguf",
                 "-o", from_peft])  # --format gguf of an adapter: its GGUF LoRA
            with open(lora_gguf, "rb") as a, open(from_peft, "rb") as b:
                if a.read() != b.read():
                    fail("the GGUF LoRA from the PEFT files differs from the checkpoint's")
        theirs = llama_tokens(args.llama_bin, base_gguf, lora_gguf, prompts, n)
        for prompt in prompts:
            ids = ",".join(map(str, prompt))

            def ours(model):
                out = run([attend, "generate", "--model", model, "--prompt-ids", ids, "--max-new-tokens", str(n),
                           "--greedy", "--weights", "f32", "--json"])
                return json.loads(out)["ids"]

            adapted, plain = ours(f"{lora}/checkpoint"), ours(f"{base}/checkpoint")
            if adapted == plain:
                fail(f"{layout}: the adapters do not change the greedy tokens of {prompt}; the check would prove nothing")
            if theirs[(1.0, tuple(prompt))] != adapted:
                fail(f"{layout}: llama.cpp with the GGUF LoRA generates {theirs[(1.0, tuple(prompt))]} after {prompt}, "
                     f"Attend with its adapters {adapted}")
            if theirs[(0.0, tuple(prompt))] != plain:
                fail(f"{layout}: llama.cpp with the LoRA at scale 0 generates {theirs[(0.0, tuple(prompt))]}, the base "
                     f"in Attend {plain}")
        print(f"llama_lora: {layout}: llama.cpp with the GGUF LoRA generates Attend's adapted tokens, and the base's at "
              f"scale 0")
        if layout == "llama":
            per_module(args.llama_bin, attend, work, base, base_gguf, peft, prompts, n)
    print("llama_lora: every check passed")


def per_module(llama_bin, attend, work, base, base_gguf, peft, prompts, n):
    """The PEFT adapter cut to block 1 (layers_to_transform) with v_proj at rank 2 of 4 (rank_pattern) and o_proj at
    another alpha (alpha_pattern): its GGUF LoRA holds pairs of two ranks and none for block 0, and llama.cpp applies
    it as Attend runs the PEFT directory."""
    cut = os.path.join(work, "llama-peft-cut")
    tiny_runs.cut_peft_adapter(peft, cut)
    cut_gguf = os.path.join(work, "llama-lora-cut.gguf")
    run([attend, "export", "--model", f"{base}/checkpoint", "--lora", cut, "--format", "gguf-lora", "-o", cut_gguf])
    theirs = llama_tokens(llama_bin, base_gguf, cut_gguf, prompts, n)
    if all(theirs[(1.0, tuple(p))] == theirs[(0.0, tuple(p))] for p in prompts):
        fail("llama (ranks module by module): the cut adapter changes no greedy token; the check would prove nothing")
    for prompt in prompts:
        ids = ",".join(map(str, prompt))
        out = run([attend, "generate", "--model", f"{base}/checkpoint", "--lora", cut, "--prompt-ids", ids,
                   "--max-new-tokens", str(n), "--greedy", "--weights", "f32", "--json"])
        ours = json.loads(out)["ids"]
        if theirs[(1.0, tuple(prompt))] != ours:
            fail(f"llama (ranks module by module): llama.cpp generates {theirs[(1.0, tuple(prompt))]} after {prompt}, "
                 f"Attend with the PEFT directory {ours}")
    print("llama_lora: llama: an adapter on block 1 alone with ranks 2 and 4 and two alphas, in llama.cpp as in Attend")


if __name__ == "__main__":
    main()
