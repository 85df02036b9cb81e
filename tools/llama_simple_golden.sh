#!/usr/bin/env bash
# Writes DIR/golden.json for the GGUF fixture scripts (tools/make_gguf_fixtures.sh, tools/make_gguf_arch_fixtures.sh):
# llama.cpp's build, and llama-simple's greedy continuation (24 tokens) of three prompts on each DIR/FILE.gguf
# (keys "FILE|PROMPT"). llama-simple prints the prompt and then the continuation; the golden keeps the continuation.
#
#   tools/llama_simple_golden.sh LLAMA_BIN_DIR QUANTIZE_LOG DIR FILE...
#
# The build is read from QUANTIZE_LOG (llama-quantize's output); a llama.cpp built from an exported tree, without
# its git history, reports build 0 (unknown), and LLAMA_COMMIT names it then.
set -euo pipefail
llama=${1:?usage: tools/llama_simple_golden.sh LLAMA_BIN_DIR QUANTIZE_LOG DIR FILE...}
log=${2:?usage: tools/llama_simple_golden.sh LLAMA_BIN_DIR QUANTIZE_LOG DIR FILE...}
out=${3:?usage: tools/llama_simple_golden.sh LLAMA_BIN_DIR QUANTIZE_LOG DIR FILE...}
shift 3
version=$(grep -m1 -o 'build = [1-9][0-9]* ([0-9a-f]*)' "$log" || echo "${LLAMA_COMMIT:-unknown}")
{
  printf '{\n  "llama_cpp": "%s",\n  "new_tokens": 24,\n  "continuations": {\n' "$version"
  first=1
  for file in "$@"; do
    for prompt in "The jury said" "In the morning" "The president of the"; do
      text=$("$llama/llama-simple" -m "$out/$file.gguf" -n 24 "$prompt" 2>/dev/null)
      ((first)) || printf ',\n'
      first=0
      python3 -c 'import json, sys; f, p, t = sys.argv[1:]; print("    " + json.dumps(f + "|" + p) + ": " + json.dumps(t[len(p):]), end="")' \
        "$file" "$prompt" "$text"
    done
  done
  printf '\n  }\n}\n'
} > "$out/golden.json"
