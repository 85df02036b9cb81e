#!/usr/bin/env bash
# Attend beside llama.cpp on the same quantized GGUF files (docs/BENCHMARKS.md, "Quantized GGUF files beside
# llama.cpp"): each round runs llama-bench and then Attend on every file, so that the machine's drift falls on both.
#
#   bench/beside_llama_quant.sh LLAMA_BIN_DIR ROUNDS FILE.gguf...
#
# LLAMA_BIN_DIR holds a llama.cpp build's llama-bench (built outside this repository). llama-bench: a 512-token
# prompt (pp512) and 128 tokens generated from an empty context (tg128), 3 repetitions, flash attention off and
# on, weights mapped and read in (bench/llama_bench.sh; the best is llama.cpp's figure); Attend
# (attend_generate_bench --model FILE): the same prompt, and 128 tokens after a 1-token prompt, 3 passes, an fp16
# KV cache as llama.cpp's default. One JSON line a measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
llama=${1:?usage: bench/beside_llama_quant.sh LLAMA_BIN_DIR ROUNDS FILE.gguf...}
rounds=${2:?usage: bench/beside_llama_quant.sh LLAMA_BIN_DIR ROUNDS FILE.gguf...}
shift 2
(($# > 0)) || { echo "usage: bench/beside_llama_quant.sh LLAMA_BIN_DIR ROUNDS FILE.gguf..." >&2; exit 2; }
bench="build/bench/attend_generate_bench --isa ${ATTEND_ISA:-auto}"
source bench/llama_bench.sh
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
     "$(grep -o 'avx512[a-z_0-9]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')" >&2
# llama-bench has no --version: its build is in every JSON line it writes.
echo "llama.cpp: $("$llama/llama-bench" -m "$1" -p 0 -n 1 -r 1 -t 2 -o jsonl 2>/dev/null |
  sed -E 's/.*"build_commit": "([^"]+)", "build_number": ([0-9]+).*/build \2 (\1)/' | head -1)" >&2
for round in $(seq 1 "$rounds"); do
  for file in "$@"; do
    echo "{\"round\": $round, \"engine\": \"llama.cpp\", \"file\": \"$(basename "$file")\"}"
    llama_bench "$llama" -m "$file" -p 512 -n 128 -r 3 -t 2
    echo "{\"round\": $round, \"engine\": \"attend\", \"file\": \"$(basename "$file")\"}"
    $bench --model "$file" --prompt 512 --new 128 --passes 3 --kv-cache f16
    $bench --model "$file" --prompt 1 --new 128 --passes 3 --kv-cache f16
  done
done
