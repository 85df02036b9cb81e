#!/usr/bin/env python3
"""`attend chat` and Ctrl-C: during a reply it ends the reply and the conversation goes on; at the prompt it leaves.

  tests/chat_interrupt.py ATTEND_BINARY MODEL_DIR

MODEL_DIR is a small decoder with a tokenizer and a chat template (CTest's serve_model fixture), replying greedily:
a first run checks that its reply of up to 64 tokens has 32 bytes of text or more (else the check cannot run: exit
77, skipped), so that Ctrl-C sent as the reply's first text appears comes while the reply is under way.
"""
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
    attend, model = sys.argv[1:3]
    base = [attend, "chat", "--model", model, "--weights", "f32", "--greedy", "--context", "512"]
    first = subprocess.run(base + ["--max-new-tokens", "64"], input=b"hello there\n", capture_output=True, timeout=60)
    if first.returncode != 0:
        fail(f"attend chat exited {first.returncode}: {first.stderr[-500:]!r}")
    if len(first.stdout) < 32:  # a token of this 300-token vocabulary is one to a few bytes
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
        proc.stdin.write(b"again\n/exit\n")
        proc.stdin.close()
        rc = proc.wait(timeout=60)
    if rc != 0:
        fail(f"attend chat exited {rc} after /exit: {open(err_path, 'rb').read()[-500:]!r}")
    if size() <= before:
        fail("no reply to the turn after the interrupted one")
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
