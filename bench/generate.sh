#!/usr/bin/env bash
# Inference of a GPT-2-124M-shaped model, batch 1, fp32, 2 threads: Attend beside PyTorch 1.13 in the same
# run (prompt of 512 tokens, then 128 generated), each in its own process. Attend runs with fp32 and bf16
# weights, each with an fp32 KV cache and with an fp16 one (llama.cpp's default cache type).
#
#   bench/generate.sh   # needs build/ and Debian's python3-torch (scripts/setup.sh --with-peers)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peer_env.sh
export OMP_NUM_THREADS=2
for weights in f32 bf16; do
  for cache in f32 f16; do
    build/bench/attend_generate_bench --prompt 512 --new 128 --weights $weights --kv-cache $cache
  done
done
/usr/bin/python3 bench/generate_torch.py --prompt 512 --new 128
