#!/usr/bin/env bash
# LoRA against full fine-tuning, GPT-2-124M shape on the Brown corpus with GPT-2's tokenizer, fp32, 2 threads,
# 8 sequences of 128 tokens a step: r = 8 on attention q and v (issue 24's goal shape). Both start from the same
# base (a checkpoint of one step, made once); the two alternate in each round, each run in its own process.
# Per run: the median tokens/s over its steps (the first dropped); attend inspect gives the trainable share and
# the gradient and moment memory.
#
#   bench/lora.sh                    # ROUNDS=3 STEPS=5 PRECISION=f32; WORK=/tmp/attend_lora_bench
#   PRECISION=bf16 bench/lora.sh     # both in mixed precision (the base's matmuls bf16; adapters stay fp32)
#   QLORA=q4_k bench/lora.sh         # also QLoRA: the same adapters on the frozen projections held as Q4_K
#
# Each run's peak resident memory (GNU time's maximum RSS) is recorded beside its rate.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3} steps=${STEPS:-5} precision=${PRECISION:-f32}
work=${WORK:-/tmp/attend_lora_bench}
mkdir -p "$work"
export OMP_NUM_THREADS=2
data=(--set data.train=data/brown.txt --set data.tokenizer=data/gpt2 --set data.batch_size=8 --set data.seq_len=128
  --set data.max_valid_batches=1 --set train.eval_every=0 --set train.checkpoint_every=0 --set train.warmup_steps=1)
if [[ ! -f "$work/base/checkpoint/model.safetensors" ]]; then
  rm -rf "$work/base"
  build/attend train --set model.vocab_size=50257 --set model.d_model=768 --set model.n_layers=12 \
    --set model.n_heads=12 --set model.max_seq_len=1024 --set model.position=learned --set model.activation=gelu_tanh \
    --set model.tie_embeddings=true "${data[@]}" --set train.steps=2 --set out="$work/base" >/dev/null 2>&1
fi
run() {  # full | lora | qlora
  local out="$work/$1"
  rm -rf "$out"; mkdir -p "$out"; cp -r "$work/base/data" "$out/"
  local extra=()
  [[ $1 != full ]] && extra=(--set train.lora.r=8 --set train.lora.alpha=16 --set train.lora.targets=q,v)
  [[ $1 == qlora ]] && extra+=(--set train.frozen_weights="$QLORA")
  /usr/bin/time -f %M -o "$out/rss_kb" build/attend train --set train.init_from="$work/base/checkpoint" "${extra[@]}" "${data[@]}" \
    --set train.steps="$steps" --set train.precision="$precision" --set out="$out" >/dev/null 2>"$out/stderr" ||
    { cat "$out/stderr"; exit 1; }
  python3 - "$1" "$out/metrics.jsonl" "$(cat "$out/rss_kb")" <<'PY' | tee -a "$work/results.jsonl"
import json, statistics, sys
name, path, rss_kb = sys.argv[1:]
steps = [json.loads(l) for l in open(path) if l.strip()][1:]
print(json.dumps({"run": name, "tokens_per_s": statistics.median(s["tokens_per_s"] for s in steps),
                  "peak_rss_mb": int(rss_kb) / 1024}))
PY
}
rm -f "$work/results.jsonl"
echo "precision: $precision"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(grep -o 'avx512f\|avx512_bf16\|avx512_vnni\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '))"
for round in $(seq "$rounds"); do run full; run lora; [[ -n ${QLORA:-} ]] && run qlora; done
build/attend inspect "$work/lora/checkpoint" --summary | tail -4
python3 - "$work/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
full = [r["tokens_per_s"] for r in rows if r["run"] == "full"]
lora = [r["tokens_per_s"] for r in rows if r["run"] == "lora"]
ratios = [b / a for a, b in zip(full, lora)]
print(f"full fine-tuning {min(full):.0f}-{max(full):.0f} tokens/s, LoRA {min(lora):.0f}-{max(lora):.0f}; "
      f"LoRA / full in each round {min(ratios):.2f}-{max(ratios):.2f}x")
for name in ("full", "lora", "qlora"):
    rss = [r["peak_rss_mb"] for r in rows if r["run"] == name]
    rate = [r["tokens_per_s"] for r in rows if r["run"] == name]
    if rss:
        print(f"{name}: peak RSS {min(rss):.0f}-{max(rss):.0f} MB, {min(rate):.0f}-{max(rate):.0f} tokens/s")
PY
