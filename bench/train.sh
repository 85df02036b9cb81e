#!/usr/bin/env bash
# Training throughput (forward + backward + AdamW, fp32, 2 threads) of Attend beside PyTorch 1.13 on the
# issue's two shapes, each in its own process, and the ratios.
#
#   bench/train.sh   # needs build/ and Debian's python3-torch (scripts/setup.sh --with-peers) as /usr/bin/python3
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=2
for shape in S gpt2; do
  steps=$([[ $shape == S ]] && echo 6 || echo 4)
  a=$(build/bench/attend_train_bench --shape "$shape" --steps "$steps")
  t=$(OPENBLAS_CORETYPE=SKYLAKEX /usr/bin/python3 bench/train_torch.py --shape "$shape" --steps "$steps")
  echo "$a"
  echo "$t"
  /usr/bin/python3 -c "import json,sys; a=json.loads(sys.argv[1]); t=json.loads(sys.argv[2]); \
print(f\"{a['shape']}: Attend / PyTorch = {a['tokens_per_s']/t['tokens_per_s']:.2f}x tokens/s, \
memory {a['peak_rss_mib']/t['peak_rss_mib']:.2f}x\")" "$a" "$t"
done
