#!/usr/bin/env bash
# Attend beside llama.cpp on the same GPT-2-124M weights, alternating the engines round by round so that
# the machine's drift falls on both (docs/BENCHMARKS.md, "Inference beside llama.cpp").
#
#   bench/beside_llama.sh LLAMA_BIN_DIR GGUF_DIR [ROUNDS]
#
# LLAMA_BIN_DIR holds a llama.cpp build's llama-bench (built outside this repository, as
# ../shared/peers/README.md describes); GGUF_DIR holds gpt2-f32.gguf and gpt2-F16.gguf made from Attend's
# export of the same model (and, if present, gpt2-Q8_0.gguf, gpt2-Q4_0.gguf, gpt2-Q4_K_M.gguf, measured
# for the record). llama-bench runs in each of the configurations bench/llama_bench.sh names, the best taken.
# Prints one JSON line per measurement, tagged with the round and the engine.
#
# An AVX2 machine on an AVX-512 one: ATTEND_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 for Attend's kernels and oneDNN's, and a
# llama.cpp built with -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
llama=${1:?usage: bench/beside_llama.sh LLAMA_BIN_DIR GGUF_DIR [ROUNDS]}
gguf=${2:?usage: bench/beside_llama.sh LLAMA_BIN_DIR GGUF_DIR [ROUNDS]}
rounds=${3:-3}
bench="build/bench/attend_generate_bench --isa ${ATTEND_ISA:-auto}"
source bench/llama_bench.sh
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
     "$(grep -o 'avx512[a-z_0-9]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')" >&2
# llama-bench has no --version: its build is in every JSON line it writes.
echo "llama.cpp: $("$llama/llama-bench" -m "$gguf/gpt2-F16.gguf" -p 0 -n 1 -r 1 -t 2 -o jsonl 2>/dev/null |
  sed -E 's/.*"build_commit": "([^"]+)", "build_number": ([0-9]+).*/build \2 (\1)/' | head -1)" >&2

for round in $(seq 1 "$rounds"); do
  for pair in "f32 gpt2-f32" "bf16 gpt2-F16"; do
    set -- $pair
    echo "{\"round\": $round, \"engine\": \"llama.cpp\", \"file\": \"$2\"}"
    llama_bench "$llama" -m "$gguf/$2.gguf" -p 512 -n 128 -pg 512,128 -r 3 -t 2
    echo "{\"round\": $round, \"engine\": \"attend\", \"weights\": \"$1\"}"
    $bench --prompt 512 --new 128 --passes 3 --weights "$1" --kv-cache f16
    $bench --prompt 1 --new 128 --passes 3 --weights "$1" --kv-cache f16
  done
done
for q in Q8_0 Q4_0 Q4_K_M; do
  [[ -f "$gguf/gpt2-$q.gguf" ]] || continue
  echo "{\"engine\": \"llama.cpp\", \"file\": \"gpt2-$q\"}"
  llama_bench "$llama" -m "$gguf/gpt2-$q.gguf" -p 512 -n 128 -r 3 -t 2
done
