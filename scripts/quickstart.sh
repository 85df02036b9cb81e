#!/usr/bin/env bash
# The README's first command: set everything up, then run Attend's main job.
# Until model training lands (issues 5-8), the main job is the first stage of the pipeline on real text:
# train a byte-level BPE tokenizer on the Brown corpus, then tokenize and detokenize a sentence with it
# and with GPT-2's published vocabulary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p runs/brown-bpe
build/attend tokenizer train --kind bpe --vocab-size 8000 --input data/brown.txt -o runs/brown-bpe/tokenizer.json
sentence="The jury praised the administration of the city's election."
echo "Brown BPE:"
build/attend tokenize --tokenizer runs/brown-bpe/tokenizer.json --text "$sentence" --json
echo "GPT-2:"
ids=$(build/attend tokenize --tokenizer data/gpt2 --text "$sentence")
echo "$ids"
build/attend detokenize --tokenizer data/gpt2 --ids "$ids"
