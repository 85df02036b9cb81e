#!/usr/bin/env bash
# Makes tests/data/gguf/arch/: small trained models of the qwen3 and gemma3 architectures as GGUF files written
# by Attend, for the tests that check them against llama.cpp (tests/test_gguf_export.cpp,
# GgufFixtures.ArchitecturesGreedyTokensAreLlamaSimples):
#
#   qwen3-tiny-F16.gguf, gemma3-tiny-F16.gguf    written by Attend (attend export --format gguf --type f16)
#   qwen3-tiny-Q8_0.gguf, gemma3-tiny-Q8_0.gguf  written by llama.cpp's llama-quantize from them
#   golden.json                                  llama.cpp's build, and llama-simple's greedy continuation of three
#                                                prompts on each file (keys "FILE|PROMPT")
#
# The models: two blocks of 256 on a 320-token BPE vocabulary, trained 400 steps on the Brown corpus. qwen3:
# SwiGLU, grouped K/V heads, head norms, heads of 96 (not 256 / 4). gemma3: GELU-gated FFNs, four norms a block
# of 1 + γ (stored by llama.cpp's convention as 1 + γ), head norms, embeddings × √d_model, a 16-token sliding
# window in block 0 with its own RoPE base (block 1 global), heads of 96. Their generated text runs past the
# window, and both keep RoPE's halves (NEOX) in the file: what these files check.
#
#   tools/make_gguf_arch_fixtures.sh LLAMA_BIN_DIR
#
#   LLAMA_COMMIT=<commit> tools/make_gguf_arch_fixtures.sh LLAMA_BIN_DIR   (a build that does not know its commit)
#
# LLAMA_BIN_DIR holds llama-quantize and llama-simple of a llama.cpp build recent enough for qwen3 and gemma3
# (2025-04 or later), made outside this repository (its code is not part of Attend). Needs build/attend and the
# Brown corpus (scripts/get-data.sh brown).
set -euo pipefail
cd "$(dirname "$0")/.."
llama=${1:?usage: tools/make_gguf_arch_fixtures.sh LLAMA_BIN_DIR}
for tool in llama-quantize llama-simple; do
  [[ -x $llama/$tool ]] || { echo "make_gguf_arch_fixtures: no $llama/$tool" >&2; exit 1; }
done
out=tests/data/gguf/arch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/tok" "$out"
build/attend tokenizer train --kind bpe --vocab-size 320 --input data/brown/train.txt -o "$work/tok/tokenizer.json"
common=(--config configs/gpt.json --set data.tokenizer="$work/tok/tokenizer.json" --set model.vocab_size=320
  --set model.d_model=256 --set model.n_layers=2 --set model.n_heads=4 --set model.n_kv_heads=2
  --set model.head_dim=96 --set model.d_ff=512 --set model.max_seq_len=64 --set data.seq_len=64
  --set model.residual_dropout=0 --set model.position=rope --set model.norm=rmsnorm --set model.bias=false
  --set model.qk_norm=true --set train.steps=400 --set train.warmup_steps=40 --set train.eval_every=400
  --set train.checkpoint_every=400)
build/attend train "${common[@]}" --set model.activation=swiglu --set model.rope_base=1000000 \
  --set out="$work/qwen3" > "$work/qwen3.log"
build/attend train "${common[@]}" --set model.activation=geglu --set model.sandwich_norm=true \
  --set model.norm_unit_offset=true --set model.scale_embeddings=true --set model.sliding_window=16 \
  --set model.sliding_window_pattern=2 --set model.rope_base=1000000 --set model.rope_local_base=10000 \
  --set out="$work/gemma3" > "$work/gemma3.log"
for arch in qwen3 gemma3; do
  build/attend export --model "$work/$arch/checkpoint" --format gguf --type f16 -o "$out/$arch-tiny-F16.gguf"
  "$llama/llama-quantize" "$out/$arch-tiny-F16.gguf" "$out/$arch-tiny-Q8_0.gguf" Q8_0 >> "$work/quantize.log" 2>&1
done

tools/llama_simple_golden.sh "$llama" "$work/quantize.log" "$out" qwen3-tiny-F16 qwen3-tiny-Q8_0 gemma3-tiny-F16 gemma3-tiny-Q8_0
ls -l "$out"
