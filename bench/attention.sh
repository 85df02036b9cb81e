#!/usr/bin/env bash
# Attention forward+backward, batch 1, 12 heads, d_head 64, causal, fp32, 2 threads: Attend's tiled and
# reference kernels beside PyTorch 1.13, each configuration in its own process. Then decode steps.
#
#   bench/attention.sh   # needs build/ and Debian's python3-torch (scripts/setup.sh --with-peers) as /usr/bin/python3
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peer_env.sh
bench=build/bench/attend_attention_bench
export OMP_NUM_THREADS=2
for T in 512 1024 2048 4096 8192 16384; do
  $bench --kernel flash --T "$T" --repeats 3
  if ((T <= 2048)); then $bench --kernel reference --T "$T" --repeats 1; fi
  # PyTorch needs 9.7 GiB at T = 8192 and runs out of memory at 16384 on this 24 GiB machine.
  if ((T <= 8192)); then
    /usr/bin/python3 bench/attention_torch.py --T "$T" --repeats $((T >= 8192 ? 1 : 3))
  fi
done
for T in 128 512 1024 2048 4096; do $bench --kernel decode --T "$T" --repeats 3; done
