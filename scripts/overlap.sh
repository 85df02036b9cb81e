#!/usr/bin/env bash
# Counts the evaluation items of each task that occur verbatim in its training data (docs/RESULTS.md,
# "Overlap between the splits"). Needs scripts/get-data.sh first.
#
#   scripts/overlap.sh          # every task: spam, g2p, brown
#   scripts/overlap.sh spam     # one
#
# What counts as an item and as "verbatim":
#   spam   a message's text as the model reads it (subject and body, lower-cased, as the tokenizer does):
#          test and validation messages whose whole text is also a training message's; the same for the
#          text with its label, and for the first 1,000 characters (the model's 256 tokens cover about that)
#   g2p    a test word (its letters) that is also a training word, and a test (word, pronunciation) pair
#          that is also a training pair; for the stress-free files (*-39.tsv) the task trains on
#   brown  a validation sentence (a line of at least 8 words: shorter lines such as "Yes ." repeat by
#          chance) that is also a training line
set -euo pipefail
cd "$(dirname "$0")/.."

# overlap TRAIN EVAL KEY: "n of m" EVAL items whose key (an awk expression over $0) is some TRAIN item's key.
overlap() {
  awk -F'\t' -v key="$3" '
    function k() {
      if (key == "text") return tolower($2)
      if (key == "labelled") return $1 "\t" tolower($2)
      if (key == "head") return substr(tolower($2), 1, 1000)
      if (key == "word") return $1
      return $0
    }
    FNR == NR { seen[k()] = 1; next }
    { n++; if (k() in seen) hit++ }
    END { printf "%d of %d (%.2f%%)", hit, n, n ? 100 * hit / n : 0 }' "$1" "$2"
}

spam() {
  local split
  for split in test valid; do
    echo "spam  $split: whole text in training $(overlap data/spam/train.tsv data/spam/$split.tsv text)," \
      "with its label $(overlap data/spam/train.tsv data/spam/$split.tsv labelled)," \
      "first 1,000 characters $(overlap data/spam/train.tsv data/spam/$split.tsv head)"
  done
}

g2p() {
  echo "g2p   test words in training $(overlap data/cmudict/train-39.tsv data/cmudict/test-39.tsv word)," \
    "test (word, pronunciation) pairs $(overlap data/cmudict/train-39.tsv data/cmudict/test-39.tsv pair)"
}

brown() {
  local long
  long=$(mktemp)
  awk 'NF >= 8' data/brown/valid.txt >"$long"
  echo "brown validation lines of 8+ words in training $(overlap data/brown/train.txt "$long" line)"
  rm -f "$long"
}

tasks=("$@")
((${#tasks[@]})) || tasks=(spam g2p brown)
for t in "${tasks[@]}"; do
  case $t in
    spam | g2p | brown) "$t" ;;
    *)
      echo "scripts/overlap.sh: unknown task '$t' (expected spam, g2p or brown)" >&2
      exit 1
      ;;
  esac
done
