#!/usr/bin/env bash
# Makes tests/data/gguf/: one small trained model as GGUF files written by both sides, for the tests that read
# llama.cpp's own files (tests/test_gguf_export.cpp, GgufFixtures.*):
#
#   brown-tiny-F16.gguf      written by Attend (attend export --format gguf --type f16)
#   brown-tiny-Q8_0.gguf     written by llama.cpp's llama-quantize from that file
#   brown-tiny-Q4_K_M.gguf   the same, Q4_K_M
#   golden.json              llama.cpp's build, and llama-simple's greedy continuation of three prompts on each file
#                            (keys "FILE|PROMPT")
#
# The model: GPT-2 layout, one block of 256 (whole 256-value blocks, so the K types apply), a 320-token BPE
# vocabulary, trained 400 steps on the Brown corpus, so that its greedy tokens have margins no rounding moves.
#
#   tools/make_gguf_fixtures.sh LLAMA_BIN_DIR
#
# LLAMA_BIN_DIR holds llama-quantize and llama-simple of a llama.cpp build made outside this repository (its
# code is not part of Attend). Needs build/attend and the Brown corpus (scripts/get-data.sh brown).
set -euo pipefail
cd "$(dirname "$0")/.."
llama=${1:?usage: tools/make_gguf_fixtures.sh LLAMA_BIN_DIR}
for tool in llama-quantize llama-simple; do
  [[ -x $llama/$tool ]] || { echo "make_gguf_fixtures: no $llama/$tool" >&2; exit 1; }
done
out=tests/data/gguf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/tok"
build/attend tokenizer train --kind bpe --vocab-size 320 --input data/brown/train.txt -o "$work/tok/tokenizer.json"
build/attend train --config configs/gpt.json --set data.tokenizer="$work/tok/tokenizer.json" \
  --set model.vocab_size=320 --set model.d_model=256 --set model.n_layers=1 --set model.n_heads=4 \
  --set model.d_ff=512 --set model.max_seq_len=64 --set data.seq_len=64 --set model.residual_dropout=0 \
  --set train.steps=400 --set train.warmup_steps=40 --set train.eval_every=400 --set train.checkpoint_every=400 \
  --set out="$work/run" > "$work/train.log"
mkdir -p "$out"
build/attend export --model "$work/run/checkpoint" --format gguf --type f16 -o "$out/brown-tiny-F16.gguf"
"$llama/llama-quantize" "$out/brown-tiny-F16.gguf" "$out/brown-tiny-Q8_0.gguf" Q8_0 > "$work/quantize.log" 2>&1
"$llama/llama-quantize" "$out/brown-tiny-F16.gguf" "$out/brown-tiny-Q4_K_M.gguf" Q4_K_M >> "$work/quantize.log" 2>&1

tools/llama_simple_golden.sh "$llama" "$work/quantize.log" "$out" brown-tiny-F16 brown-tiny-Q8_0 brown-tiny-Q4_K_M
ls -l "$out"
