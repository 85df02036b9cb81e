#!/usr/bin/env bash
# Attend beside llama.cpp on one model directory and its GGUF (the same weights), alternating the engines round by
# round: prompt processing (512 tokens) and generation (128 tokens, from an empty cache and after the prompt).
# Attend is measured as llama-bench measures itself (a warm-up, then the passes; attend_generate_bench --model), and
# once more cold, as a user's `attend generate` runs (one prompt in a fresh process: oneDNN's first kernels and the
# buffers' first pages included).
# docs/BENCHMARKS.md, "A Llama-3.2-1B shape beside llama.cpp".
#
#   bench/beside_llama_model.sh LLAMA_BIN_DIR MODEL.gguf ATTEND_MODEL_DIR [ROUNDS] [WEIGHTS]
#
# ATTEND_MODEL_DIR holds the model the GGUF was made from (Attend's own directory or a Hugging Face one), or is the
# GGUF file itself (Attend then runs the very file llama.cpp runs); WEIGHTS is Attend's --weights (bf16 by default,
# against an F16 GGUF; "stored" runs a GGUF file's matrices as it stores them). llama-bench runs with flash
# attention off and on, its weights mapped and read in (bench/llama_bench.sh), the best taken; both engines use an
# f16 KV cache and THREADS threads (2 by default; pin a one-thread run with taskset). Prints one JSON line per
# measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
llama=${1:?usage: bench/beside_llama_model.sh LLAMA_BIN_DIR MODEL.gguf ATTEND_MODEL_DIR [ROUNDS] [WEIGHTS]}
gguf=${2:?usage}
model=${3:?usage}
rounds=${4:-3}
weights=${5:-bf16}
threads=${THREADS:-2}
if [[ -f $model ]]; then  # a GGUF file: its vocabulary from attend inspect's first line
  vocab=$(build/attend inspect "$model" --summary | sed -n '1s/.*vocabulary \([0-9]*\).*/\1/p')
else
  vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$model/config.json" | head -1)
fi
weight_option=(--weights "$weights")
[[ $weights == stored ]] && weight_option=()
# 512 prompt ids drawn once (a fixed seed), the same for every round.
prompt=$(awk -v v="${vocab:-32000}" 'BEGIN { srand(1); for (i = 0; i < 512; ++i) printf "%s%d", (i ? "," : ""), 1000 + int(rand() * (v - 2000)) }')
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(grep -o 'avx512[a-z_0-9]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')" >&2
source bench/llama_bench.sh
# attend generate prints "N tokens (why), prompt P ms, R tokens/s" on stderr; the last id of the vocabulary is the
# only stop token (a random model would otherwise stop at its EOS now and then), and "tokens" shows it ran 128.
attend_run() {
  local ids=$1 label=$2
  ATTEND_THREADS=$threads build/attend generate --model "$model" --prompt-ids "$ids" --max-new-tokens 128 --greedy --eos $((vocab - 1)) \
    "${weight_option[@]}" --kv-cache f16 2>&1 >/dev/null | tail -1 |
    sed -E "s/([0-9]+) tokens \(([a-z]+)\), prompt ([0-9.]+) ms, ([0-9.]+) tokens\/s/{\"engine\": \"attend\", \"run\": \"$label\", \"tokens\": \1, \"prompt_ms\": \3, \"generate_tokens_per_s\": \4}/"
}
bench=(build/bench/attend_generate_bench --model "$model" "${weight_option[@]}" --threads "$threads" --kv-cache f16 --passes 2)
for round in $(seq 1 "$rounds"); do
  echo "{\"round\": $round, \"engine\": \"llama.cpp\"}"
  llama_bench "$llama" -m "$gguf" -p 512 -n 128 -r 2 -t "$threads"
  echo "{\"round\": $round, \"engine\": \"attend\", \"weights\": \"$weights\"}"
  "${bench[@]}" --prompt 512 --new 1 | sed -E 's/.*("prompt_tokens_per_s": [0-9.]+).*/{"engine": "attend", "run": "pp512 (warm)", \1}/'
  "${bench[@]}" --prompt 1 --new 128 | sed -E 's/.*("generate_tokens_per_s": [0-9.]+).*("share_of_bound": [0-9.]+).*/{"engine": "attend", "run": "tg128 (warm)", \1, \2}/'
  attend_run "$prompt" "prompt 512 + 128 (cold)"
  attend_run "${prompt%%,*}" "prompt 1 + 128 (cold)"
done
