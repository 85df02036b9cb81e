#!/usr/bin/env python3
"""A GGUF file runs as it stores its matrices unless --weights names a type: `attend serve` of an F32 file (exported
from the F16 fixture) gives, without --weights, the log-probabilities of --weights f32 bit for bit, and --weights
bf16 others. Without --weights an F32 file ran in serve's fallback, bf16, where the help says "as a GGUF file stores
them".

  python3 tests/gguf_weights_cli.py --attend build/attend --work /tmp/attend_gguf_weights --data tests/data

Exits 0 when every check passed, 1 with the first failure.
"""
import json
import os
import shutil
import urllib.request

import tiny_runs

fail, run = tiny_runs.checks("gguf_weights_cli")


def served_logprobs(attend, model, *extra):
    """The token log-probabilities of a greedy completion from `attend serve --model MODEL EXTRA`."""
    server, port = tiny_runs.start_serve(fail, attend, "--model", model, *extra)
    try:
        url = f"http://127.0.0.1:{port}"
        tiny_runs.wait_ready(fail, url, server)
        body = {"prompt": "the jury said", "max_tokens": 12, "temperature": 0, "logprobs": 1}
        request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            return json.loads(r.read())["choices"][0]["logprobs"]["token_logprobs"]
    finally:
        server.terminate()
        server.wait()


def main():
    attend, work, data = tiny_runs.paths(__doc__, "data")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    f32 = os.path.join(work, "brown-tiny-f32.gguf")
    run([attend, "export", "--model", os.path.join(data, "gguf", "brown-tiny-F16.gguf"), "--format", "gguf",
         "--type", "f32", "-o", f32])
    as_stored = served_logprobs(attend, f32)
    named_f32 = served_logprobs(attend, f32, "--weights", "f32")
    named_bf16 = served_logprobs(attend, f32, "--weights", "bf16")
    if len(as_stored) != 12:
        fail(f"expected 12 log-probabilities, got {as_stored}")
    if as_stored != named_f32:
        fail(f"an F32 file without --weights: {as_stored}; with --weights f32: {named_f32}")
    if named_bf16 == named_f32:
        fail(f"--weights bf16 gave fp32's log-probabilities exactly ({named_bf16}): the check cannot tell them apart")
    print("gguf_weights_cli: an F32 file serves in fp32 without --weights (bit for bit), bf16 differs")


if __name__ == "__main__":
    main()
