#!/usr/bin/env python3
"""`attend chat` and Ctrl-C: during a reply it ends the reply and the conversation goes on; at the prompt it leaves.

  tests/chat_interrupt.py ATTEND_BINARY MODEL_DIR

MODEL_DIR holds a tokenizer and a chat template (CTest's serve_model fixture). The test makes its own model with
them: wider and with a context of 8,192, so that a reply which is not interrupted runs for seconds. Replies are
greedy; a first run checks that the reply is not ended by an end token within 256 tokens (else the check cannot
run: exit 77, skipped), so that Ctrl-C sent as the reply's first text appears comes while the reply is under way.
"""
import os
import shutil
import signal
import subprocess
import sys
import time


def fail(message):
    print(f"chat_interrupt: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            fail(f"timed out waiting for {what}")
        time.sleep(0.002)


def main():
    attend, fixture = sys.argv[1:3]
    model = os.path.abspath("chat_interrupt_model")
    shutil.rmtree(model, ignore_errors=True)
    made = subprocess.run([attend, "init", "--tokenizer", os.path.join(fixture, "tokenizer.json"),
                           "--set", "architecture=decoder", "--set", "d_model=256", "--set", "n_layers=4",
                           "--set", "n_heads=4", "--set", "max_seq_len=8192", "--set", "position=rope", "-o", model],
                          capture_output=True, timeout=120)
    if made.returncode != 0:
        fail(f"attend init exited {made.returncode}: {made.stderr[-500:]!r}")
    shutil.copy(os.path.join(fixture, "chat_template.jinja"), model)
    base = [attend, "chat", "--model", model, "--weights", "f32", "--greedy", "--context", "8192"]
    # 256 tokens of greedy reply with at least 128 bytes of text: no end token came early.
    first = subprocess.run(base + ["--max-new-tokens", "256"], input=b"hello there\n", capture_output=True, timeout=120)
    if first.returncode != 0:
        fail(f"attend chat exited {first.returncode}: {first.stderr[-500:]!r}")
    if len(first.stdout) < 128:  # a token of this 300-token vocabulary is one to a few bytes
        print(f"chat_interrupt: skipped: the greedy reply ends early ({len(first.stdout)} bytes)")
        sys.exit(77)
    cmd = base + ["--max-new-tokens", "100000"]
    out_path, err_path = "chat_interrupt.out", "chat_interrupt.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=err)
        size = lambda: len(open(out_path, "rb").read())
        proc.stdin.write(b"hello there\n")
        proc.stdin.flush()
        wait_for(lambda: size() > 0 or proc.poll() is not None, "the first reply's first text")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: b"(reply interrupted)" in open(err_path, "rb").read() or proc.poll() is not None,
                 "the interruption's word")
        if proc.poll() is not None:
            fail(f"Ctrl-C during a reply ended attend chat (exit {proc.returncode}): "
                 f"{open(err_path, 'rb').read()[-500:]!r}")
        before = size()
        proc.stdin.write(b"again\n")
        proc.stdin.flush()
        wait_for(lambda: size() > before + 1 or proc.poll() is not None, "the next reply's text")
        proc.send_signal(signal.SIGINT)  # that one too, so that the run ends in seconds
        proc.stdin.write(b"/exit\n")
        proc.stdin.close()
        rc = proc.wait(timeout=60)
    if rc != 0:
        fail(f"attend chat exited {rc} after /exit: {open(err_path, 'rb').read()[-500:]!r}")
    if size() <= before + 1 or b"attend:" in open(err_path, "rb").read():
        fail(f"no reply to the turn after the interrupted one: {open(err_path, 'rb').read()[-500:]!r}")
    print("chat_interrupt: Ctrl-C ended the reply, the next turn was answered")

    # At the prompt (no reply under way), Ctrl-C leaves as the default action does: killed by SIGINT.
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # loaded and waiting for a line (or still loading: either way no reply is under way)
    proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("Ctrl-C at the prompt did not end attend chat")
    if rc != -signal.SIGINT:
        fail(f"Ctrl-C at the prompt: exit {rc}, expected death by SIGINT")
    print("chat_interrupt: Ctrl-C at the prompt left; every check passed")


if __name__ == "__main__":
    main()
