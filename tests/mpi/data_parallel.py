#!/usr/bin/env python3
"""`mpirun -np 2 attend train` against one process, a rank killed mid-run, SIGTERM to every rank, and two hosts in
network namespaces.

  tests/mpi/data_parallel.py --attend build/attend --work /tmp/attend_mpi same      # two ranks = one process
  tests/mpi/data_parallel.py --attend build/attend --work /tmp/attend_mpi death     # kill -9 of rank 1
  tests/mpi/data_parallel.py --attend build/attend --work /tmp/attend_mpi stop      # SIGTERM to both ranks
  tests/mpi/data_parallel.py --attend build/attend --work /tmp/attend_mpi netns     # two hosts over a veth pair
  tests/mpi/data_parallel.py --attend build/attend --work /tmp/attend_mpi lora      # a per-module adapter on 2 ranks

same: a tiny GPT (LM, 200 steps; ZeRO-1 off and on) and a tiny T5-style encoder-decoder (seq2seq, 100 steps,
ZeRO-1 on) trained by one process and by two ranks with the same global batch: every step's loss within
1e-6 of the single process's (issue 23's bound), the validation losses too, and the final weights within
AdamW's 2·Σ lr (the largest difference printed).

death: two ranks checkpointing every 5 steps; rank 1 is killed with SIGKILL. mpirun must end the job within
10 s with a message naming the rank, the checkpoint must load (`attend inspect`), and `--resume` on two ranks
must finish the run.

stop: SIGTERM to both ranks at once, as a scheduler ends a job: they stop at one step, write its checkpoint, exit
non-zero (143), and `--resume` finishes the run from it.

netns: two network namespaces joined by a veth pair (10.231.0.1 and .2), mpirun in the first, the second
rank started by mpirun's remote-shell agent set to `ip netns exec` (the host name is the namespace's), the
ranks talking TCP over the veth: the same losses as one process. Needs root (ip netns); exits 77 (skipped)
without it.

lora: a PEFT adapter on block 1's c_attn alone (layers_to_transform), which rank 0 alone reads (train.lora.from),
trained on for 20 steps by one process and by two ranks: the other rank takes its modules from rank 0's model, the
same losses within 1e-6 and the same adapters in the checkpoint's config.json.

Exits 0 when every check passed, 1 with the first failure.
"""
import argparse
import array
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1",
           # one host's ranks talk through shared memory; keep Open MPI from probing other transports
           "OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_pml": "ob1"}


def fail(message):
    print(f"data_parallel: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def words():
    return ("the jury said it did find that many of the new laws were not clear and the city was to pay "
            "for its own work on a plan which would take place in two years if they could get money").split()


def write_data(work):
    rng = random.Random(0)
    text = os.path.join(work, "corpus.txt")
    with open(text, "w") as f:
        for i in range(3000):
            f.write(" ".join(rng.choice(words()) for _ in range(rng.randint(5, 14))) + "\n")
            if i % 5 == 4:
                f.write("\n")
    pairs = os.path.join(work, "pairs.tsv")
    with open(pairs, "w") as f:
        for _ in range(2000):
            source = [rng.choice(words()) for _ in range(rng.randint(2, 6))]
            f.write(" ".join(source) + "\t" + " ".join(reversed(source)) + "\n")
    return text, pairs


def tokenizer(args, text):
    path = os.path.join(args.work, "tokenizer.json")
    subprocess.run([args.attend, "tokenizer", "train", "--kind", "wordpiece", "--vocab-size", "200", "--input", text,
                    "-o", path], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def lm_command(args, tok, text, out, steps, extra=()):
    return [args.attend, "train",
            "--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "model.n_heads=2",
            "--set", "model.max_seq_len=32", "--set", f"data.train={text}", "--set", f"data.tokenizer={tok}",
            "--set", "data.batch_size=8", "--set", "data.seq_len=32", "--set", "data.max_valid_batches=4",
            "--set", "train.warmup_steps=10", "--set", "train.eval_every=50", "--set", "train.checkpoint_every=0",
            "--set", "train.grad_accum=2", "--set", "train.bucket_mb=0.01",
            "--set", f"train.steps={steps}", "--set", f"out={out}", *extra]


def seq2seq_command(args, tok, pairs, out, steps, extra=()):
    return [args.attend, "train",
            "--set", "model.architecture=encoder-decoder", "--set", "model.position=t5", "--set", "model.norm=rmsnorm",
            "--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "model.n_heads=2",
            "--set", "model.max_seq_len=32", "--set", "data.task=seq2seq", "--set", f"data.train={pairs}",
            "--set", f"data.tokenizer={tok}", "--set", "data.batch_size=8", "--set", "data.seq_len=32",
            "--set", "data.max_target_len=32", "--set", "data.max_valid_batches=4",
            "--set", "train.warmup_steps=10", "--set", "train.eval_every=50", "--set", "train.checkpoint_every=0",
            "--set", "train.bucket_mb=0.01", "--set", f"train.steps={steps}", "--set", f"out={out}", *extra]


def run(cmd, what, env=None, timeout=300):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env={**os.environ, **MPI_ENV, **(env or {})})
    if proc.returncode != 0:
        fail(f"{what} exited with {proc.returncode}:\n{proc.stdout[-3000:]}")
    return proc.stdout


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare(one, many, what, bound=1e-6):
    a, b = metrics(one), metrics(many)
    if len(a) != len(b):
        fail(f"{what}: {len(a)} steps in one process, {len(b)} on the ranks")
    worst = 0.0
    for x, y in zip(a, b):
        for key in ("loss", "val_loss"):
            if key not in x:
                continue
            if key not in y:
                fail(f"{what}: step {x['step']} has no {key} on the ranks")
            rel = abs(x[key] - y[key]) / abs(x[key])
            worst = max(worst, rel)
            if rel > bound:
                fail(f"{what}: step {x['step']} {key} {y[key]!r} on the ranks, {x[key]!r} in one process "
                     f"({rel:.2e} relative, bound {bound:g})")
        if y.get("ranks") != 2:
            fail(f"{what}: step {y['step']} was not trained on 2 ranks: {y}")
    print(f"{what}: {len(a)} steps, largest relative loss difference {worst:.2e} (bound {bound:g})")


def safetensors_f32(path):
    """{name: array('f')} of an F32 safetensors file (Attend's model.safetensors)."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            fail(f"{path}: {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        values = array.array("f")
        values.frombytes(data[8 + n + begin:8 + n + end])
        out[name] = values
    return out


def compare_weights(one, many, what, steps, peak_lr):
    """The final weights of the two runs. AdamW moves a weight by at most about lr per step (m̂/√v̂ is at most 1 in
    size for steady gradients), and a weight whose gradient is zero up to rounding can move either way in the two
    runs, so 2·Σ lr bounds any difference; the runs stay far inside it (the measured largest is printed)."""
    a = safetensors_f32(os.path.join(one, "checkpoint", "model.safetensors"))
    b = safetensors_f32(os.path.join(many, "checkpoint", "model.safetensors"))
    if a.keys() != b.keys():
        fail(f"{what}: the checkpoints hold different tensors")
    worst = max(abs(x - y) for name in a for x, y in zip(a[name], b[name]))
    bound = 2 * steps * peak_lr
    if worst > bound:
        fail(f"{what}: a weight differs by {worst:.3e} between one process and the ranks (bound {bound:g})")
    print(f"{what}: largest weight difference {worst:.2e} (bound 2·steps·lr = {bound:g})")


def mpirun(n=2):
    return ["mpirun", "-np", str(n), "--oversubscribe"]


def same(args, tok, text, pairs):
    for zero in ("false", "true"):
        one, two = os.path.join(args.work, f"lm_one_{zero}"), os.path.join(args.work, f"lm_two_{zero}")
        run(lm_command(args, tok, text, one, 200, ["--set", f"train.zero={zero}"]), "one process")
        run(mpirun() + lm_command(args, tok, text, two, 200, ["--set", f"train.zero={zero}"]), "mpirun -np 2")
        compare(one, two, f"lm, zero={zero}")
        compare_weights(one, two, f"lm, zero={zero}", 200, 3e-4)  # train.lr's default
    one, two = os.path.join(args.work, "s2s_one"), os.path.join(args.work, "s2s_two")
    run(seq2seq_command(args, tok, pairs, one, 100), "one process")
    run(mpirun() + seq2seq_command(args, tok, pairs, two, 100, ["--set", "train.zero=true"]), "mpirun -np 2")
    compare(one, two, "seq2seq, zero=true")
    compare_weights(one, two, "seq2seq, zero=true", 100, 3e-4)


def rank_pid(parent, rank):
    """The pid of a child of `parent` whose environment says it is MPI rank `rank`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return int(pid)
        except OSError:
            continue
    return None


def signal_ranks(proc, ranks, sig, timeout, what):
    """Sends `sig` to these ranks of the job mpirun `proc` runs and waits for mpirun to end: its output, and when the
    signal went. Fails when a rank's process is not found or mpirun runs on past `timeout` seconds."""
    pids = [rank_pid(proc.pid, r) for r in ranks]
    if None in pids:
        proc.kill()
        fail(f"could not find rank {ranks[pids.index(None)]}'s process")
    sent = time.time()
    for pid in pids:
        os.kill(pid, sig)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail(f"mpirun was still running {timeout} s after {what}")
    return output, sent


def death(args, tok, text):
    out = os.path.join(args.work, "death")
    extra = ["--set", "train.checkpoint_every=5", "--set", "train.zero=true", "--set", "model.d_model=64",
             "--set", "model.n_layers=4"]
    cmd = mpirun() + lm_command(args, tok, text, out, 100000, extra)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **MPI_ENV})
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(out, "checkpoint", "trainer.json")):
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            fail(f"no checkpoint appeared: {proc.stdout.read()[-2000:]}")
        time.sleep(0.05)
    time.sleep(0.3)
    output, killed = signal_ranks(proc, [1], signal.SIGKILL, 10, "rank 1 died")
    took = time.time() - killed
    if proc.returncode == 0:
        fail("mpirun exited 0 after a rank died")
    if "rank 1" not in output:
        fail(f"mpirun's message does not name rank 1:\n{output[-2000:]}")
    print(f"death: the job ended {took:.1f} s after rank 1 was killed, exit {proc.returncode}; mpirun said: "
          + next((line.strip() for line in output.splitlines() if "rank 1" in line), ""))
    run([args.attend, "inspect", os.path.join(out, "checkpoint")], "attend inspect of the checkpoint left behind")
    with open(os.path.join(out, "checkpoint", "trainer.json")) as f:
        step = json.load(f)["step"]
    run(mpirun() + lm_command(args, tok, text, out, step + 10, extra) + ["--resume"], "--resume after the death")
    last = metrics(out)[-1]
    if last["step"] != step + 10:
        fail(f"the resumed run ended at step {last['step']}, expected {step + 10}")
    print(f"death: resumed from step {step} and finished at step {last['step']}")


def stop(args, tok, text):
    """SIGTERM to every rank at once, as a scheduler ends a job (Slurm's scancel, a preemption): the ranks agree on
    a step, write its checkpoint (ZeRO-1's shares gathered) and exit 143; the run resumes from it. Before, rank 1
    died at once and rank 0 wrote nothing."""
    out = os.path.join(args.work, "stop")
    extra = ["--set", "train.checkpoint_every=0", "--set", "train.zero=true"]
    proc = subprocess.Popen(mpirun() + lm_command(args, tok, text, out, 100000, extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **MPI_ENV})
    path = os.path.join(out, "metrics.jsonl")
    deadline = time.time() + 60
    while not (os.path.exists(path) and open(path).read().count("\n") >= 3):
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            fail(f"training did not start: {proc.stdout.read()[-2000:]}")
        time.sleep(0.02)
    output, _ = signal_ranks(proc, [0, 1], signal.SIGTERM, 60, "SIGTERM to every rank")
    said = [line for line in output.splitlines() if "interrupted: checkpoint written at step" in line]
    if proc.returncode != 128 + signal.SIGTERM or not said:
        fail(f"SIGTERM to every rank: exit {proc.returncode}, no word of a checkpoint:\n{output[-2000:]}")
    step = int(said[0].split("at step")[1].split()[0])
    with open(os.path.join(out, "checkpoint", "trainer.json")) as f:
        if json.load(f)["step"] != step:
            fail(f"the checkpoint is not of step {step}, where the ranks said they stopped")
    run(mpirun() + lm_command(args, tok, text, out, step + 10, extra) + ["--resume"], "--resume after the stop")
    if metrics(out)[-1]["step"] != step + 10:
        fail(f"the resumed run ended at step {metrics(out)[-1]['step']}, expected {step + 10}")
    print(f"stop: SIGTERM to both ranks stopped them at step {step} with its checkpoint (mpirun exit "
          f"{proc.returncode}); resumed to step {step + 10}")


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def netns(args, tok, text):
    a, b = "attend-mpi-a", "attend-mpi-b"
    probe = subprocess.run(["ip", "netns", "add", a], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        print(f"netns: skipped: cannot make a network namespace ({probe.stdout.strip()}); needs root")
        sys.exit(77)
    try:
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", "attend-veth-a", "type", "veth", "peer", "name", "attend-veth-b")
        sh("ip", "link", "set", "attend-veth-a", "netns", a)
        sh("ip", "link", "set", "attend-veth-b", "netns", b)
        for ns, dev, ip in ((a, "attend-veth-a", "10.231.0.1"), (b, "attend-veth-b", "10.231.0.2")):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", a, "ping", "-c", "1", "-W", "2", "10.231.0.2", check=False)
        hostfile = os.path.join(args.work, "hosts")
        # The first rank runs where mpirun does (this namespace, named by its own host name); the second on
        # "host" b, reached by the agent: `ip netns exec attend-mpi-b orted ...`.
        with open(hostfile, "w") as f:
            f.write(f"{os.uname().nodename} slots=1\n{b} slots=1\n")
        # mpirun's agent gets the host and the daemon's command line as one string (for ssh, which hands it to
        # a shell): `ip netns exec` needs a shell around it.
        agent = os.path.join(args.work, "netns-agent")
        with open(agent, "w") as f:
            f.write('#!/bin/sh\nhost=$1; shift\nexec ip netns exec "$host" /bin/sh -c "$*"\n')
        os.chmod(agent, 0o755)
        one, two = os.path.join(args.work, "netns_one"), os.path.join(args.work, "netns_two")
        run(lm_command(args, tok, text, one, 100), "one process")
        cmd = ["ip", "netns", "exec", a, "mpirun", "-np", "2", "--hostfile", hostfile, "--bind-to", "none",
               "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
               "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "10.231.0.0/24",
               "--mca", "oob_tcp_if_include", "10.231.0.0/24",
               "-x", "OMP_NUM_THREADS=1", "-x", "PATH", "-x", "ATTEND_MPI_CONNECT_TIMEOUT=10"]
        output = run(cmd + lm_command(args, tok, text, two, 100), "mpirun across two network namespaces")
        compare(one, two, "two hosts (network namespaces, TCP over veth)")
        # A rank that cannot reach the other fails at start-up, saying so. The daemons still start over the veth,
        # but the ranks are told to talk on a network each host has alone: a veth apiece whose other end lies
        # unconfigured in this namespace.
        for ns, ip, dev in ((a, "10.232.0.1", "attend-isl-a"), (b, "10.232.0.2", "attend-isl-b")):
            sh("ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "x")
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        island = [("10.231.0.0/24" if x == "10.231.0.0/24" and cmd[i - 1] == "oob_tcp_if_include" else
                   "10.232.0.0/24" if x == "10.231.0.0/24" else x) for i, x in enumerate(cmd)]
        started = time.time()
        broken = subprocess.run(island + lm_command(args, tok, text, os.path.join(args.work, "netns_broken"), 10),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                                env={**os.environ, **MPI_ENV})
        took = time.time() - started
        if broken.returncode == 0:
            fail("mpirun succeeded with ranks that cannot reach each other")
        said = [line for line in broken.stdout.splitlines()
                if "no answer from rank" in line or "unable to reach each other" in line]
        if not said:
            fail(f"the start-up failure does not say which rank did not answer:\n{broken.stdout[-3000:]}")
        print(f"netns: ranks that cannot reach each other: exit {broken.returncode} after {took:.0f} s: {said[0].strip()}")
    finally:
        subprocess.run(["ip", "netns", "del", a], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", b], stderr=subprocess.DEVNULL)


def lora(args, tok, text):
    base = os.path.join(args.work, "base")
    run(lm_command(args, tok, text, base, 20), "the base")
    peft = os.path.join(args.work, "peft")
    os.makedirs(peft)
    with open(os.path.join(peft, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["c_attn"], "fan_in_fan_out": True,
                   "layers_to_transform": [1], "layers_pattern": "h"}, f)
    rng = random.Random(5)
    tensors = {"base_model.model.transformer.h.1.attn.c_attn.lora_A.weight": [2, 32],
               "base_model.model.transformer.h.1.attn.c_attn.lora_B.weight": [96, 2]}
    header, blob = {}, b""
    for name, shape in tensors.items():
        values = array.array("f", (rng.uniform(-0.2, 0.2) for _ in range(shape[0] * shape[1]))).tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(values)]}
        blob += values
    text_header = json.dumps(header).encode()
    with open(os.path.join(peft, "adapter_model.safetensors"), "wb") as f:
        f.write(len(text_header).to_bytes(8, "little") + text_header + blob)
    extra = ["--set", f"train.init_from={base}/checkpoint", "--set", f"train.lora.from={peft}", "--set",
             "train.lora.r=2", "--set", "train.lora.alpha=4", "--set", "train.lora.targets=q,k,v", "--set",
             "train.lr=1e-2"]
    one, two = os.path.join(args.work, "lora_one"), os.path.join(args.work, "lora_two")
    run(lm_command(args, tok, text, one, 20, extra), "one process")
    run(mpirun() + lm_command(args, tok, text, two, 20, extra), "mpirun -np 2")
    compare(one, two, "train.lora.from a per-module adapter")
    configs = []
    for out in (one, two):
        with open(os.path.join(out, "checkpoint", "config.json")) as f:
            configs.append(json.load(f)["lora_per_module"])
    if configs[0] != configs[1] or sorted(configs[0]) != [f"decoder.layers.1.attn.qkv.{t}" for t in "kqv"]:
        fail(f"train.lora.from a per-module adapter: lora_per_module {configs[0]} in one process, {configs[1]} on "
             "the ranks")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attend", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("check", choices=["same", "death", "stop", "netns", "lora"])
    args = parser.parse_args()
    args.attend = os.path.abspath(args.attend)
    work = args.work = os.path.join(os.path.abspath(args.work), args.check)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    text, pairs = write_data(work)
    tok = tokenizer(args, text)
    {"same": lambda: same(args, tok, text, pairs), "death": lambda: death(args, tok, text),
     "stop": lambda: stop(args, tok, text),
     "netns": lambda: netns(args, tok, text), "lora": lambda: lora(args, tok, text)}[args.check]()
    print(f"data_parallel {args.check}: every check passed")


if __name__ == "__main__":
    main()
