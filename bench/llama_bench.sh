# Sourced by the scripts that measure beside llama.cpp (bench/beside_llama*.sh): llama_bench LLAMA_BIN_DIR ARGS...
# runs llama-bench in each of its configurations that can matter on a CPU, flash attention off (its default) and
# on, its weights memory-mapped (its default) and read into its own buffers, and prints one JSON line per
# configuration and test, cut to the configuration and the rate. llama.cpp's figure is the best of them.
llama_bench() {
  local llama=$1
  shift
  "$llama/llama-bench" "$@" -fa 0,1 -mmp 0,1 -o jsonl |
    sed -E 's/.*"flash_attn": ([a-z]+).*"use_mmap": ([a-z]+).*"n_prompt": ([0-9]+), "n_gen": ([0-9]+).*"avg_ts": ([0-9.]+).*/{"flash_attn": \1, "use_mmap": \2, "n_prompt": \3, "n_gen": \4, "tokens_per_s": \5}/'
}
