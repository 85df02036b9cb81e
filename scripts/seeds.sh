#!/usr/bin/env bash
# Reruns a task with several seeds and prints the spread of its figure (docs/RESULTS.md, "Spread over
# seeds"). A seed sets the initialisation (model.seed), the data order (data.seed) and dropout (train.seed).
# Each seed's run goes to runs/seeds/TASK-SEED/ and is picked up where it stopped when run again.
#
#   scripts/seeds.sh brown 1 2 3 [--set KEY=VALUE ...]   # configs/gpt.json: final validation loss
#   scripts/seeds.sh spam 1 2 3 [--set KEY=VALUE ...]    # configs/spam.json fine-tuned from one MLM
#                                                        # pre-training (scripts/task.sh spam's, seed 0):
#                                                        # test accuracy and spam F1
#   scripts/seeds.sh g2p 1 2 [--set KEY=VALUE ...]       # configs/g2p.json: test WER/PER, beam 8
#
# Extra --set options go to every seed's `attend train` (for brown, the quickstart's schedule is
# --set train.steps=400 --set train.warmup_steps=40 --set train.eval_every=100).
set -euo pipefail
cd "$(dirname "$0")/.."
task=${1:?usage: scripts/seeds.sh brown|spam|g2p SEED... [--set KEY=VALUE ...]}
shift
seeds=()
while (($#)) && [[ $1 =~ ^[0-9]+$ ]]; do seeds+=("$1"); shift; done
((${#seeds[@]})) || { echo "scripts/seeds.sh: name at least one seed" >&2; exit 2; }
attend=${ATTEND:-build/attend}  # ATTEND=path runs another binary (a copy, while build/ is rebuilt)
mkdir -p runs/seeds

# The run's last validation loss, from its metrics.jsonl.
last_val_loss() { grep '"val_loss"' "$1/metrics.jsonl" | tail -1 | sed 's/.*"val_loss": *\([-0-9.e+]*\).*/\1/'; }

# train CONFIG OUT SEED [ARGS...]: one seed's run, resumed when it has a checkpoint.
train() {
  local config=$1 out=$2 seed=$3
  shift 3
  local resume=()
  [[ -d $out/checkpoint ]] && resume=(--resume)
  $attend train --config "$config" --set model.seed="$seed" --set data.seed="$seed" --set train.seed="$seed" \
    --set out="$out" "$@" "${resume[@]}"
}

case $task in
  brown)
    mkdir -p runs/brown-bpe
    [[ -s runs/brown-bpe/tokenizer.json ]] ||
      $attend tokenizer train --kind bpe --vocab-size 8000 --input data/brown/train.txt -o runs/brown-bpe/tokenizer.json
    for s in "${seeds[@]}"; do train configs/gpt.json "runs/seeds/brown-$s" "$s" "$@"; done
    for s in "${seeds[@]}"; do echo "brown seed $s: validation loss $(last_val_loss "runs/seeds/brown-$s")"; done
    ;;
  spam)
    [[ -d runs/spam-mlm/checkpoint && -s runs/spam-tok/tokenizer.json ]] || {
      echo "scripts/seeds.sh: spam fine-tunes runs/spam-mlm/checkpoint: run scripts/task.sh spam first" >&2
      exit 1
    }
    for s in "${seeds[@]}"; do
      out=runs/seeds/spam-$s
      train configs/spam.json "$out" "$s" "$@"
      $attend eval-classify --model "$out/checkpoint" --data data/spam/test.tsv --positive spam --json >"$out/test.json"
    done
    for s in "${seeds[@]}"; do echo "spam seed $s: $(cat "runs/seeds/spam-$s/test.json")"; done
    ;;
  g2p)
    [[ -s runs/g2p-tok/tokenizer.json ]] || {
      echo "scripts/seeds.sh: g2p uses runs/g2p-tok/tokenizer.json: run scripts/task.sh g2p first" >&2
      exit 1
    }
    for s in "${seeds[@]}"; do
      out=runs/seeds/g2p-$s
      train configs/g2p.json "$out" "$s" "$@"
      $attend eval-seq2seq --model "$out/checkpoint" --data data/cmudict/test-39.tsv --beam 8 | tee "$out/test.txt"
    done
    ;;
  *)
    echo "scripts/seeds.sh: unknown task '$task' (expected brown, spam or g2p)" >&2
    exit 1
    ;;
esac
