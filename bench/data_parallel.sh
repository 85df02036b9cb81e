#!/usr/bin/env bash
# Data parallelism on one 2-core machine, GPT-2-124M shape on the Brown corpus (GPT-2's tokenizer), fp32:
#   one    1 process × 2 threads                     (the baseline)
#   dp     mpirun -np 2, 1 thread each, f32 gradients in 25 MB buckets started during backward, without ZeRO-1
#          (train.zero=false)
#   end    the same with one bucket sent after the whole backward (bucket_mb=0: nothing hidden)
#   bf16   dp with bf16 gradients on the wire
#   zero   the default: dp with ZeRO-1 (train.zero's auto)
# in alternating rounds, each run in its own process(es). Per run: the median over its steps (the first
# dropped) of tokens/s, compute (forward + backward) and the wait for the reduction after backward, and the
# bytes each rank sent per step, and the time spent in backward's hook moving the transfers on. Then
# efficiency = dp / one (same round), and the share of the communication done during backward = hook time /
# (hook time + wait). bench/data_parallel_model.py turns the figures into the p-machine model.
#
#   bench/data_parallel.sh                 # ROUNDS=3 STEPS=6 BATCH=8 SEQ=128 by default
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3} steps=${STEPS:-6} batch=${BATCH:-8} seq=${SEQ:-128}
work=${WORK:-/tmp/attend_dp_bench}
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--set model.vocab_size=50257 --set model.d_model=768 --set model.n_layers=12 --set model.n_heads=12
  --set model.max_seq_len=1024 --set model.position=learned --set model.activation=gelu_tanh
  --set model.tie_embeddings=true --set data.train=data/brown.txt --set data.tokenizer=data/gpt2
  --set data.batch_size="$batch" --set data.seq_len="$seq" --set data.max_valid_batches=1
  --set train.steps="$steps" --set train.eval_every=0 --set train.checkpoint_every=0 --set train.warmup_steps=2)

# The token cache is made once and copied into every run's directory.
if [[ ! -f "$work/cache/data/train.tokens" ]]; then
  rm -rf "$work/cache"
  build/attend train "${common[@]}" --set train.steps=3 --set data.batch_size=1 --set data.seq_len=8 \
    --set out="$work/cache" >/dev/null
fi
fresh() { rm -rf "$work/$1"; mkdir -p "$work/$1"; cp -r "$work/cache/data" "$work/$1/"; echo "$work/$1"; }

run() {  # NAME: one run of that configuration
  local name=$1 out
  out=$(fresh "$name")
  case $name in
    one) OMP_NUM_THREADS=2 build/attend train "${common[@]}" --set out="$out" ;;
    # dp, end, bf16: without ZeRO-1 (train.zero=false; its default, auto, turns it on with several ranks)
    dp) mpirun -np 2 -x OMP_NUM_THREADS=1 build/attend train "${common[@]}" --set train.zero=false --set out="$out" ;;
    end) mpirun -np 2 -x OMP_NUM_THREADS=1 build/attend train "${common[@]}" --set train.zero=false --set train.bucket_mb=0 --set out="$out" ;;
    bf16) mpirun -np 2 -x OMP_NUM_THREADS=1 build/attend train "${common[@]}" --set train.zero=false --set train.allreduce=bf16 --set out="$out" ;;
    zero) mpirun -np 2 -x OMP_NUM_THREADS=1 build/attend train "${common[@]}" --set out="$out" ;;  # the default
  esac >/dev/null 2>"$out/stderr" || { cat "$out/stderr"; exit 1; }
  python3 - "$name" "$out/metrics.jsonl" <<'PY' | tee -a "$work/results.jsonl"
import json, statistics, sys
name, path = sys.argv[1:]
steps = [json.loads(l) for l in open(path) if l.strip()][1:]
med = lambda k: statistics.median(s[k] for s in steps) if k in steps[0] else None
print(json.dumps({"run": name, "tokens_per_s": med("tokens_per_s"), "compute_s": med("compute_s"),
                  "comm_overlap_s": med("comm_overlap_s"), "comm_wait_s": med("comm_wait_s"),
                  "comm_bytes": med("comm_bytes"), "steps": len(steps)}))
PY
}

rm -f "$work/results.jsonl"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(grep -o 'avx512f\|avx512_bf16\|avx512_vnni\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '))"
for round in $(seq "$rounds"); do
  for name in one dp end bf16 zero; do run "$name"; done
done
python3 - "$work/results.jsonl" <<'PY'
import collections, json, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[r["run"]].append(r)
def span(values, fmt="{:.1f}"):
    return fmt.format(min(values)) + ("" if min(values) == max(values) else "-" + fmt.format(max(values)))
rounds = len(runs["one"])
print(f"rounds: {rounds}; efficiency = tokens/s of the 2 ranks x 1 thread / 1 process x 2 threads, same round")
for name in ("dp", "end", "bf16", "zero"):
    eff = [runs[name][i]["tokens_per_s"] / runs["one"][i]["tokens_per_s"] for i in range(rounds)]
    rs = runs[name]
    hidden = [r["comm_overlap_s"] / (r["comm_overlap_s"] + r["comm_wait_s"]) for r in rs]
    print(f"{name:5s} efficiency {span(eff, '{:.2f}')}  tokens/s {span([r['tokens_per_s'] for r in rs])}"
          f"  compute {span([r['compute_s'] for r in rs], '{:.2f}')} s (of it in the hook {span([r['comm_overlap_s'] for r in rs], '{:.3f}')} s)"
          f"  wait {span([r['comm_wait_s'] for r in rs], '{:.3f}')} s  share in the hook {span(hidden, '{:.2f}')}"
          f"  sent {rs[0]['comm_bytes'] / 1e6:.0f} MB/step/rank")
print(f"one   tokens/s {span([r['tokens_per_s'] for r in runs['one']])}")
PY
