#!/usr/bin/env bash
# The README's first command: set everything up, then run Attend's main job on real text:
#   1. train an 8000-token byte-level BPE tokenizer on the Brown corpus (about a second);
#   2. train a 5M-parameter GPT on it for 400 steps (about five minutes on two cores), with a progress
#      bar, validation loss, a checkpoint and a plot of the curves;
#   3. generate from three prompts with it.
# Run it again and it picks the run up where it stopped (or finds it finished).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p runs/brown-bpe
[[ -s runs/brown-bpe/tokenizer.json ]] ||
  build/attend tokenizer train --kind bpe --vocab-size 8000 --input data/brown/train.txt -o runs/brown-bpe/tokenizer.json
resume=()
[[ -d runs/brown-gpt/checkpoint ]] && resume=(--resume)
build/attend train --config configs/gpt.json --set train.steps=400 --set train.warmup_steps=40 \
  --set train.eval_every=100 --set out=runs/brown-gpt "${resume[@]}"
for prompt in "The jury said" "In the morning" "The president of the"; do
  echo "--- $prompt"
  build/attend generate --model runs/brown-gpt/checkpoint --prompt "$prompt" --max-new-tokens 40 \
    --temperature 0.8 --top-k 40 --seed 1
done
echo "model: runs/brown-gpt/checkpoint  curves: runs/brown-gpt/loss.svg  metrics: runs/brown-gpt/metrics.jsonl"
