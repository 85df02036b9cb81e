// The TSV data files: "source<TAB>target" lines (seq2seq) or "label<TAB>text" lines (classify), read into
// examples and collated into batches. The first byte picks the task (bit 0: classify) and whether a
// validation file follows the training file (bit 1), cut at the line "#### valid".
#include "fuzz_util.h"

#include <attend/train.h>

namespace {

const attend::Tokenizer& tokenizer() {
  static const attend::Tokenizer tok = attend::Tokenizer::train_from_text(
      "the cat sat on the mat\nspam ham eggs\nhello world\nthe quick brown fox jumps over the lazy dog\n",
      {.kind = attend::TokenizerKind::WordPiece, .vocab_size = 80, .min_frequency = 1});
  return tok;
}

void check_batch(const attend::Batch& b, int32_t vocab, size_t classes) {
  for (const auto* ids : {&b.ids, &b.src_ids})
    for (int32_t id : *ids)
      if (id < 0 || id >= vocab) attend::fuzz::fail("a batch holds a token id outside the vocabulary");
  for (int32_t label : b.labels)
    if (label < 0 || static_cast<size_t>(label) >= classes) attend::fuzz::fail("a batch holds an unknown label");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  if (size == 0) return 0;
  static fuzz::MemoryFile train_file("train.tsv"), valid_file("valid.tsv");
  const uint8_t mode = data[0];
  const auto files = fuzz::split(fuzz::text(data + 1, size - 1), 2, "\n#### valid\n");
  train_file.write(files[0]);
  valid_file.write(files[1]);
  DataConfig d{.task = mode & 1 ? Task::Classify : Task::Seq2Seq, .train = {train_file.path()},
               .valid = mode & 2 ? valid_file.path() : "", .valid_fraction = 0.3, .seq_len = 12, .max_target_len = 6};
  const Tokenizer& tok = tokenizer();
  try {
    ExampleSets sets = load_examples(d, tok);
    const size_t classes = sets.labels.size();
    const ExampleOptions o{.batch_size = 3, .max_source_len = d.seq_len, .max_target_len = d.max_target_len,
                           .bos_id = *tok.special_id(SpecialRole::Cls), .eos_id = *tok.special_id(SpecialRole::Sep),
                           .max_valid_batches = 4, .bucket_batches = 2};
    const ExampleDataset dataset(d.task == Task::Classify ? ExampleDataset::Kind::Classify : ExampleDataset::Kind::Seq2Seq,
                                 std::move(sets.train), std::move(sets.valid), o);
    for (int64_t i = 0; i < 4; ++i) check_batch(dataset.train_batch(i), tok.vocab_size(), classes);
    for (int64_t i = 0; i < dataset.valid_batches(); ++i) check_batch(dataset.valid_batch(i), tok.vocab_size(), classes);
  } catch (const Error&) {
  }
  return 0;
}
