#!/usr/bin/env python3
"""`attend serve` stopped while its model loads: Ctrl-C (or SIGTERM) ends it at once, exit 0, not after the load.

  tests/serve_load_interrupt.py ATTEND_BINARY WORK_DIR

The model directory's config.json is a named pipe that nothing writes, so the load waits on it for as long as the
test likes: /health answers 503 "loading" meanwhile, and the signal must end the process without the load ending.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import tiny_runs

fail, _ = tiny_runs.checks("serve_load_interrupt")


def main():
    attend, work = sys.argv[1:3]
    shutil.rmtree(work, ignore_errors=True)
    model = os.path.join(work, "model")
    os.makedirs(model)
    os.mkfifo(os.path.join(model, "config.json"))
    for sig in (signal.SIGINT, signal.SIGTERM):
        server, port = tiny_runs.start_serve(fail, attend, "--model", model)
        try:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30)
                fail("/health answered 200 while the model cannot have loaded")
            except urllib.error.HTTPError as e:
                body = json.loads(e.read())
                if e.code != 503 or body.get("status") != "loading":
                    fail(f"/health while loading: {e.code} {body}")
            start = time.monotonic()
            server.send_signal(sig)
            try:
                code = server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                fail(f"{signal.Signals(sig).name} while loading: still running 20 s later (waiting for the load)")
            rest = server.stderr.read()
            if code != 0 or "stopped while the model was loading" not in rest:
                fail(f"{signal.Signals(sig).name} while loading: exit {code}, {rest[-300:]!r}")
            print(f"serve_load_interrupt: {signal.Signals(sig).name} while loading ended it in "
                  f"{time.monotonic() - start:.2f} s")
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    print("serve_load_interrupt: every check passed")


if __name__ == "__main__":
    main()
