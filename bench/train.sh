#!/usr/bin/env bash
# Training throughput (forward + backward + AdamW, 2 threads) of Attend beside PyTorch 1.13 on the issue's
# two shapes, each run in its own process, and the ratios:
#   - Attend fp32 and PyTorch fp32 alone, alternating twice (a ratio per pair), then Attend bf16 mixed precision
#     alone (rate and peak memory);
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
  # Attend fp32 and PyTorch alone, alternating twice: each pair's ratio sees the machine's same few minutes.
  f32=() torch=()
  for _ in 1 2; do
    f32+=("$(build/bench/attend_train_bench --shape "$shape" --steps "$steps" --precision f32)")
    torch+=("$(/usr/bin/python3 bench/train_torch.py --shape "$shape" --steps "$steps")")
  done
  bf16=$(build/bench/attend_train_bench --shape "$shape" --steps "$steps" --precision bf16)
  pair=$(build/bench/attend_train_bench --shape "$shape" --steps "$((steps + 2))" --precision f32,bf16)
  printf '%s\n' "${f32[0]}" "${torch[0]}" "${f32[1]}" "${torch[1]}" "$bf16" "$pair"
  /usr/bin/python3 - "${f32[0]}" "${torch[0]}" "${f32[1]}" "${torch[1]}" "$bf16" "$pair" <<'PY'
import json, sys
f32a, torcha, f32b, torchb, bf16 = (json.loads(a) for a in sys.argv[1:6])
pair = [json.loads(l) for l in sys.argv[6].splitlines()]
ratios = ", ".join(f"{f['tokens_per_s'] / t['tokens_per_s']:.2f}x" for f, t in ((f32a, torcha), (f32b, torchb)))
print(f"{f32a['shape']}: fp32 Attend / PyTorch = {ratios} tokens/s (two alternating pairs), "
      f"memory {f32a['peak_rss_mib'] / torcha['peak_rss_mib']:.2f}x; "
      f"bf16 / fp32 = {pair[1]['tokens_per_s'] / pair[0]['tokens_per_s']:.2f}x (alternating steps), "
      f"{bf16['tokens_per_s'] / f32b['tokens_per_s']:.2f}x (separate runs); "
      f"bf16 Attend / PyTorch fp32 = {bf16['tokens_per_s'] / torchb['tokens_per_s']:.2f}x, "
      f"memory {bf16['peak_rss_mib'] / torchb['peak_rss_mib']:.2f}x")
PY
done
