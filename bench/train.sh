#!/usr/bin/env bash
# Training throughput (forward + backward + AdamW, 2 threads) of Attend beside PyTorch 1.13 on the issue's
# two shapes, each run in its own process, and the ratios:
#   - Attend fp32 and bf16 mixed precision alone (rate and peak memory), PyTorch fp32 alone;
#   - Attend fp32 and bf16 in one process with their steps alternating: the bf16 / fp32 ratio, which a
#     slow spell of this shared machine then shifts for both alike.
#
#   bench/train.sh   # needs build/ and Debian's python3-torch (scripts/setup.sh --with-peers) as /usr/bin/python3
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peer_env.sh
export OMP_NUM_THREADS=2
for shape in S gpt2; do
  steps=$([[ $shape == S ]] && echo 6 || echo 4)
  f32=$(build/bench/attend_train_bench --shape "$shape" --steps "$steps" --precision f32)
  bf16=$(build/bench/attend_train_bench --shape "$shape" --steps "$steps" --precision bf16)
  torch=$(/usr/bin/python3 bench/train_torch.py --shape "$shape" --steps "$steps")
  pair=$(build/bench/attend_train_bench --shape "$shape" --steps "$((steps + 2))" --precision f32,bf16)
  printf '%s\n' "$f32" "$bf16" "$torch" "$pair"
  /usr/bin/python3 - "$f32" "$bf16" "$torch" "$pair" <<'PY'
import json, sys
f32, bf16, torch = (json.loads(a) for a in sys.argv[1:4])
pair = [json.loads(l) for l in sys.argv[4].splitlines()]
print(f"{f32['shape']}: fp32 Attend / PyTorch = {f32['tokens_per_s'] / torch['tokens_per_s']:.2f}x tokens/s, "
      f"memory {f32['peak_rss_mib'] / torch['peak_rss_mib']:.2f}x; "
      f"bf16 / fp32 = {pair[1]['tokens_per_s'] / pair[0]['tokens_per_s']:.2f}x (alternating steps), "
      f"{bf16['tokens_per_s'] / f32['tokens_per_s']:.2f}x (separate runs); "
      f"bf16 Attend / PyTorch fp32 = {bf16['tokens_per_s'] / torch['tokens_per_s']:.2f}x, "
      f"memory {bf16['peak_rss_mib'] / torch['peak_rss_mib']:.2f}x")
PY
done
