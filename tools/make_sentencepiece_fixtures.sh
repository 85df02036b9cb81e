#!/usr/bin/env bash
# Makes SentencePiece fixtures with Debian's sentencepiece 0.1.97 command-line tools:
#
#   tests/data/spm/unigram_nfkc.model   unigram, 800 pieces, nmt_nfkc normalisation, byte fallback,
#                                       user-defined symbols <sep> and <cls>
#   tests/data/spm/bpe.model            BPE, 800 pieces, identity normalisation
#   tests/data/spm/unigram_plain.model  unigram, 600 pieces, identity normalisation, no dummy prefix,
#                                       extra whitespace kept, no byte fallback
#   tests/data/spm/bpe_spaces.model     BPE, 700 pieces, extra whitespace kept, whitespace-only pieces
#                                       ("▁▁▁▁" for indentation, as LLaMA's), byte fallback, <sep>; trained
#                                       on the same text plus indented code lines
#   tests/data/spm/*.vocab              the matching piece<TAB>score listings (for reading by eye)
#   tests/data/spm_golden.json          ids, pieces and normalised text from spm_encode/spm_normalize
#                                       for each model on ~90 varied lines
#
#   scripts/get-data.sh brown           # data/brown.txt, once
#   tools/make_sentencepiece_fixtures.sh
#
# All three are trained on the first ~300 KB of data/brown.txt (cut at a line end), one thread, no
# sentence sampling or shuffling, a fixed seed, in a scratch directory so the paths stored in the
# models' trainer_spec (input, model_prefix) are the same on every run. Needs spm_train, spm_encode,
# spm_normalize (apt-get install sentencepiece) and node.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in spm_train spm_encode spm_normalize node; do
  command -v "$tool" >/dev/null || { echo "make_sentencepiece_fixtures: $tool is needed" >&2; exit 1; }
done
[[ -s data/brown.txt ]] || { echo "make_sentencepiece_fixtures: run scripts/get-data.sh brown first" >&2; exit 1; }

out=tests/data/spm
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The first 300000 bytes, less the last (partial) line.
head -c 300000 data/brown.txt | sed '$d' >"$work/brown_300k.txt"
# The same plus indented code, so whitespace-only pieces are worth learning.
{
  cat "$work/brown_300k.txt"
  for i in $(seq 1 300); do
    printf 'def f%d(x):\n    if x > %d:\n        return x  # two  spaces\n    return %d\n' "$i" "$i" "$i"
  done
} >"$work/brown_code.txt"

common=(--input=brown_300k.txt --num_threads=1 --input_sentence_size=100000000
  --shuffle_input_sentence=false --random_seed=20240 --minloglevel=1)
declare -A options=(
  [unigram_nfkc]="--model_type=unigram --vocab_size=800 --normalization_rule_name=nmt_nfkc --byte_fallback=true --character_coverage=0.9995 --user_defined_symbols=<sep>,<cls>"
  [bpe]="--model_type=bpe --vocab_size=800 --normalization_rule_name=identity"
  [unigram_plain]="--model_type=unigram --vocab_size=600 --normalization_rule_name=identity --byte_fallback=false --add_dummy_prefix=false --remove_extra_whitespaces=false"
  [bpe_spaces]="--input=brown_code.txt --model_type=bpe --vocab_size=700 --normalization_rule_name=identity --remove_extra_whitespaces=false --allow_whitespace_only_pieces=true --byte_fallback=true --user_defined_symbols=<sep>"
)
models=(unigram_nfkc bpe unigram_plain bpe_spaces)
for m in "${models[@]}"; do
  # shellcheck disable=SC2086  # the option strings hold no spaces inside an option
  (cd "$work" && spm_train "${common[@]}" --model_prefix="$m" ${options[$m]} >"$m.log" 2>&1) || {
    cat "$work/$m.log" >&2
    exit 1
  }
  cp "$work/$m.model" "$work/$m.vocab" "$out/"
done

# Hand the options to the helper as M=OPTIONS arguments, so the JSON records them.
args=()
for m in "${models[@]}"; do args+=("$m=${options[$m]} ${common[*]}"); done
node tools/make_sentencepiece_fixtures.mjs "$out" data/brown.txt tests/data/spm_golden.json "${args[@]}"
ls -l "$out"
