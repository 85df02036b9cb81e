#!/usr/bin/env bash
# Makes tests/data/gguf/arch/: small trained models of the qwen3, gemma3 and bert architectures as GGUF files
# written by Attend, for the tests that check them against llama.cpp (tests/test_gguf_export.cpp,
# GgufFixtures.ArchitecturesGreedyTokensAreLlamaSimples, GgufFixtures.BertStatesAreLlamaEmbeddings):
#
#   qwen3-tiny-F16.gguf, gemma3-tiny-F16.gguf    written by Attend (attend export --format gguf --type f16)
#   qwen3-tiny-Q8_0.gguf, gemma3-tiny-Q8_0.gguf  written by llama.cpp's llama-quantize from them
#   golden.json                                  llama.cpp's build, and llama-simple's greedy continuation of three
#                                                prompts on each file (keys "FILE|PROMPT")
#   bert-tiny-F16.gguf, bert-tiny-Q8_0.gguf      a BERT classifier the same ways (WordPiece, uncased)
#   bert-golden.json                             llama-embedding's tokens and final hidden states (--pooling none,
#                                                unnormalized) of three texts on each file (keys "FILE|TEXT")
#
# The decoders: two blocks of 256 on a 320-token BPE vocabulary, trained 400 steps on the Brown corpus. qwen3:
# SwiGLU, grouped K/V heads, head norms, heads of 96 (not 256 / 4). gemma3: GELU-gated FFNs, four norms a block
# of 1 + γ (stored by llama.cpp's convention as 1 + γ), head norms, embeddings × √d_model, a 16-token sliding
# window in block 0 with its own RoPE base (block 1 global), heads of 96. Their generated text runs past the
# window, and both keep RoPE's halves (NEOX) in the file: what these files check. bert: two post-norm blocks of
# 128 with token types, an embedding norm, exact GELU (llama.cpp computes its tanh form), a pooler and a two-class
# head, on a 2,000-piece uncased WordPiece vocabulary, trained 300 steps as the spam classifier (its texts cut to
# 64 tokens); llama.cpp's bert holds the pooler and head but gives hidden states, which are what is compared.
#
#   tools/make_gguf_arch_fixtures.sh LLAMA_BIN_DIR
#
#   LLAMA_COMMIT=<commit> tools/make_gguf_arch_fixtures.sh LLAMA_BIN_DIR   (a build that does not know its commit)
#   PARTS=bert tools/make_gguf_arch_fixtures.sh LLAMA_BIN_DIR                (one part: decoders or bert; both by default)
#
# LLAMA_BIN_DIR holds llama-quantize, llama-simple and llama-embedding of a llama.cpp build recent enough for qwen3 and gemma3
# (2025-04 or later), made outside this repository (its code is not part of Attend). Needs build/attend and the
# Brown corpus and the spam data (scripts/get-data.sh brown spam).
set -euo pipefail
cd "$(dirname "$0")/.."
llama=${1:?usage: tools/make_gguf_arch_fixtures.sh LLAMA_BIN_DIR}
for tool in llama-quantize llama-simple llama-embedding; do
  [[ -x $llama/$tool ]] || { echo "make_gguf_arch_fixtures: no $llama/$tool" >&2; exit 1; }
done
out=tests/data/gguf/arch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

parts=" ${PARTS:-decoders bert} "
mkdir -p "$work/tok" "$out"
if [[ $parts == *" decoders "* ]]; then
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
fi

if [[ $parts == *" bert "* ]]; then
# bert: a WordPiece vocabulary from the spam training texts, a classifier trained on them.
cut -f2- data/spam/train.tsv > "$work/spam.txt"
build/attend tokenizer train --kind wordpiece --lowercase --strip-accents --vocab-size 2000 --input "$work/spam.txt" \
  -o "$work/bert-tok/tokenizer.json"
build/attend train --config configs/spam.json --set data.tokenizer="$work/bert-tok/tokenizer.json" \
  --set model.vocab_size=2000 --set model.d_model=128 --set model.n_layers=2 --set model.n_heads=4 --set model.d_ff=256 \
  --set model.max_seq_len=64 --set data.seq_len=64 --set model.norm_placement=post --set model.embedding_norm=true \
  --set model.type_vocab_size=2 --set model.mlm_head=false --set model.pooling=cls --set model.pooler=true --set model.attention_dropout=0 \
  --set model.residual_dropout=0 --set train.init_from= --set train.precision=f32 --set train.steps=300 \
  --set train.warmup_steps=30 --set train.eval_every=300 --set train.checkpoint_every=300 --set out="$work/bert" \
  > "$work/bert.log"
build/attend export --model "$work/bert/checkpoint" --format gguf --type f16 -o "$out/bert-tiny-F16.gguf"
"$llama/llama-quantize" "$out/bert-tiny-F16.gguf" "$out/bert-tiny-Q8_0.gguf" Q8_0 >> "$work/bert-quantize.log" 2>&1
version=$(grep -m1 -o 'build = [1-9][0-9]* ([0-9a-f]*)' "$work/bert-quantize.log" || echo "${LLAMA_COMMIT:-unknown}")
for file in bert-tiny-F16 bert-tiny-Q8_0; do
  for text in "The jury said it was unbelievable." "Click here to claim your FREE prize!" "Meeting moved to 3pm, see you there"; do
    # --verbose-prompt lists the tokens ("   101 -> '[CLS]'") before the JSON of the states, both on stdout. Its
    # logger can drop the end of the output at exit (the build above did, now and then): a run is repeated until
    # its JSON is whole.
    python3 - "$llama/llama-embedding" "$out/$file.gguf" "$text" "$file|$text" >> "$work/bert-golden.jsonl" <<'PY'
import json, re, subprocess, sys
tool, model, prompt, key = sys.argv[1:]
for attempt in range(20):
    text = subprocess.run([tool, "-m", model, "--pooling", "none", "--embd-normalize", "-1", "--embd-output-format",
                           "json", "--verbose-prompt", "-p", prompt], capture_output=True, text=True, check=True).stdout
    start = text.index("\n{") + 1
    try:
        rows = [d["embedding"] for d in json.loads(text[start:])["data"]]
    except json.JSONDecodeError:
        continue
    ids = [int(m) for m in re.findall(r"^\s*(\d+) -> '", text[:start], re.M)]
    assert ids and len(ids) == len(rows), (key, len(ids), len(rows))
    print(json.dumps({"key": key, "ids": ids, "hidden": [round(v, 6) for r in rows for v in r]}))
    break
else:
    sys.exit(f"llama-embedding: no whole output for {key} in 20 runs")
PY
  done
done
python3 - "$version" "$work/bert-golden.jsonl" > "$out/bert-golden.json" <<'PY'
import json, sys
version, path = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
print(json.dumps({"llama_cpp": version, "states": {r["key"]: {"ids": r["ids"], "hidden": r["hidden"]} for r in rows}}))
PY
fi
ls -l "$out"
