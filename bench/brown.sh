#!/usr/bin/env bash
# Issue 8's Brown comparison: the GPT of configs/gpt.json trained by Attend (fp32 and bf16) and by PyTorch 1.13
# (bench/brown_torch.py: the same model, token streams, batch, AdamW settings and schedule), one after the
# other on 2 threads, then validation loss against training time for all three on one plot and the time
# each Attend run takes to reach PyTorch's final validation loss. STEPS is chosen so that PyTorch's run
# takes about 60 minutes on this machine (1.17 s per step); the whole script takes about 100 minutes and
# needs the machine to itself.
#
#   bench/brown.sh            # needs build/ and Debian's python3-torch (scripts/setup.sh --with-peers)
#   STEPS=300 bench/brown.sh  # a quick check of the pipeline
#   PEER_ONLY=1 bench/brown.sh  # keep the Attend runs, redo PyTorch's, the plot and the summary
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peer_env.sh
steps=${STEPS:-3000}
export OMP_NUM_THREADS=2
mkdir -p runs/brown-bpe docs/img
[[ -s runs/brown-bpe/tokenizer.json ]] ||
  build/attend tokenizer train --kind bpe --vocab-size 8000 --input data/brown/train.txt -o runs/brown-bpe/tokenizer.json
for precision in f32 bf16; do
  [[ -n "${PEER_ONLY:-}" && -s runs/brown-attend-$precision/metrics.jsonl ]] && continue
  rm -rf runs/brown-attend-$precision
  build/attend train --config configs/gpt.json --set train.steps=$steps --set train.eval_every=100 \
    --set train.checkpoint_every=1000 --set train.precision=$precision --set out=runs/brown-attend-$precision
done
/usr/bin/python3 bench/brown_torch.py --run runs/brown-attend-f32 --out runs/brown-torch \
  --minutes 90
build/attend plot runs/brown-attend-f32/metrics.jsonl runs/brown-attend-bf16/metrics.jsonl \
  runs/brown-torch/metrics.jsonl --y val_loss --x elapsed_s -o docs/img/brown-val-loss.svg
python3 - <<'PY'
import json
def curve(path):
    return [(d["elapsed_s"], d["val_loss"]) for d in map(json.loads, open(path)) if d.get("val_loss") is not None]
torch = curve("runs/brown-torch/metrics.jsonl")
target_s, target = torch[-1]
print(f"PyTorch: validation loss {target:.4f} after {target_s / 60:.1f} minutes")
for name in ("f32", "bf16"):
    points = curve(f"runs/brown-attend-{name}/metrics.jsonl")
    reached = next((s for s, v in points if v <= target), None)
    final_s, final = points[-1]
    print(f"Attend {name}: final validation loss {final:.4f} after {final_s / 60:.1f} minutes "
          f"(the same steps {target_s / final_s:.2f}x sooner); " +
          (f"reaches PyTorch's final loss after {reached / 60:.1f} minutes ({target_s / reached:.2f}x sooner)"
           if reached is not None else "does not reach PyTorch's final loss"))
PY
