#!/usr/bin/env bash
# LoRA against full fine-tuning on the spam classifier: one encoder pre-trained with masked LM on the SpamAssassin
# training messages (configs/spam-mlm.json, shortened to MLM_STEPS), then fine-tuned as a classifier
# (configs/spam.json) in full or with LoRA adapters and the new head beside them. Judged on the 600 test
# messages: accuracy, and its improvement over always answering the majority class (what the untrained head
# does at best); issue 24's goal: LoRA's improvement within 10% of full fine-tuning's.
#
#   bench/lora_spam.sh            # WORK=/tmp/attend_lora_spam; MLM_STEPS=350
#
# Writes $WORK/results.jsonl: each run's accuracy, spam F1 and best validation loss.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${WORK:-/tmp/attend_lora_spam}
mlm_steps=${MLM_STEPS:-350}
mkdir -p "$work/text"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
scripts/get-data.sh spam >/dev/null
for split in train valid; do  # the messages' text, as scripts/task.sh spam makes it
  [[ -s "$work/text/$split.txt" ]] || cut -f2- "data/spam/$split.tsv" | sed 's/$/\n/' >"$work/text/$split.txt"
done
[[ -s "$work/tokenizer.json" ]] ||
  build/attend tokenizer train --kind wordpiece --vocab-size 8000 --lowercase --input "$work/text/train.txt" \
    -o "$work/tokenizer.json" >/dev/null
if [[ ! -f "$work/mlm/done" ]]; then
  rm -rf "$work/mlm"
  build/attend train --config configs/spam-mlm.json --set data.train="$work/text/train.txt" \
    --set data.valid="$work/text/valid.txt" --set data.tokenizer="$work/tokenizer.json" \
    --set train.steps="$mlm_steps" --set train.warmup_steps=35 --set train.eval_every="$mlm_steps" \
    --set train.checkpoint_every="$mlm_steps" --set out="$work/mlm" >"$work/mlm.log" 2>&1
  touch "$work/mlm/done"
fi

classify() {  # NAME [--set ...]: the classifier from the MLM encoder, then its test figures
  local name=$1
  shift
  local out="$work/$name"
  if [[ ! -f "$out/done" ]]; then
    rm -rf "$out"
    build/attend train --config configs/spam.json --set data.tokenizer="$work/tokenizer.json" \
      --set train.init_from="$work/mlm/checkpoint" --set train.checkpoint_every=400 "$@" --set out="$out" \
      >"$out.log" 2>&1 || { tail -5 "$out.log"; exit 1; }
    touch "$out/done"
  fi
  build/attend eval-classify --model "$out/checkpoint" --data data/spam/test.tsv --positive spam --json \
    >"$out/test.json"
  python3 - "$name" "$out/test.json" "$out/metrics.jsonl" <<'PY' | tee -a "$work/results.jsonl"
import json, sys
name, test, metrics = sys.argv[1:]
t = json.load(open(test))
rows = [json.loads(l) for l in open(metrics) if l.strip()]
best = min(r["val_loss"] for r in rows if r.get("val_loss") is not None)
print(json.dumps({"run": name, "accuracy": t["accuracy"], "f1": t.get("f1"), "best_val_loss": best}))
PY
}

rm -f "$work/results.jsonl"
classify full
classify lora --set train.lora.r=8 --set train.lora.alpha=16 --set train.lora.targets=q,k,v,o,up,down \
  --set train.lr=1e-3 --set train.min_lr=5e-5
python3 - "$work/results.jsonl" <<'PY'
import json, sys
rows = {r["run"]: r for r in map(json.loads, open(sys.argv[1]))}
with open("data/spam/test.tsv", encoding="utf-8", errors="replace") as f:
    labels = [line.split("\t", 1)[0] for line in f if line.strip()]
majority = max(labels.count(c) for c in set(labels)) / len(labels)
full, lora = rows["full"]["accuracy"], rows["lora"]["accuracy"]
print(f"spam test: majority {majority:.2%}; full fine-tuning {full:.2%} (+{full - majority:.2%}); "
      f"LoRA {lora:.2%} (+{lora - majority:.2%}): LoRA's improvement {(lora - majority) / (full - majority):.1%} "
      f"of full fine-tuning's")
ln2 = 0.6931471805599453  # the validation loss of a head that knows nothing
vf, vl = rows["full"]["best_val_loss"], rows["lora"]["best_val_loss"]
print(f"validation loss from ln 2: full {vf:.4f} (-{ln2 - vf:.4f}), LoRA {vl:.4f} (-{ln2 - vl:.4f}): "
      f"{(ln2 - vl) / (ln2 - vf):.1%}")
PY
