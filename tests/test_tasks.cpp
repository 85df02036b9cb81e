// Smoke versions of the real tasks (issue 8) on slices of the data scripts/get-data.sh prepares: the pipeline
// runs end to end and the loss falls. The full runs and their results are in docs/RESULTS.md.
#include "testing.h"

#include <attend/eval.h>
#include <attend/generate.h>
#include <attend/io.h>
#include <attend/tokenizer.h>
#include <attend/train.h>
#include <attend/model_dir.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <fstream>
#include <sstream>

namespace attend {
namespace {

namespace fs = std::filesystem;
const fs::path kData = ATTEND_DATA_DIR;

// The first n lines of a file, written to a temporary file.
fs::path head(const fs::path& file, int n, const std::string& name) {
  std::istringstream in(read_file(file));
  std::string out, line;
  for (int i = 0; i < n && std::getline(in, line); ++i) out += line + "\n";
  const fs::path path = fs::temp_directory_path() / name;
  write_file_atomic(path, out);
  return path;
}

fs::path run_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attend_task_" + name);
  fs::remove_all(dir);
  return dir;
}

// A run of `run` on its data: the dataset, the trainer (its model stays usable) and the loss of every step.
struct SmokeRun {
  std::unique_ptr<Dataset> data;
  std::unique_ptr<Trainer> trainer;
  std::vector<double> losses;
};

SmokeRun train_smoke(RunConfig run, const Tokenizer& tok, const std::string& name) {
  run.train.eval_every = 0, run.train.checkpoint_every = 0;
  run.data.tokenizer = "(in memory)";
  run.validate();
  const fs::path dir = run_dir(name);
  SmokeRun r;
  r.data = make_dataset(run, tok, dir / "data");
  r.trainer = std::make_unique<Trainer>(Model(run.model), *r.data, run.train, dir, false, &tok);
  r.trainer->run([&](const StepReport& step) { r.losses.push_back(step.loss); });
  return r;
}

// Grapheme-to-phoneme: 400 CMUdict pairs, a WordPiece vocabulary of letters and phonemes, a tiny T5-style
// model for 60 steps; the loss falls well below its start, and the phoneme error rate on training words is
// below the untrained model's and below that of an empty output.
TEST(Tasks, GraphemeToPhonemeSmoke) {
  ATTEND_SKIP_WITHOUT_DATA("cmudict/train.tsv");
  const fs::path slice = head(kData / "cmudict" / "train.tsv", 400, "attend_g2p.tsv");
  Tokenizer tok = Tokenizer::train({slice}, {.kind = TokenizerKind::WordPiece, .vocab_size = 150, .min_frequency = 1});
  RunConfig run;
  run.model.architecture = Architecture::EncoderDecoder;
  run.model.d_model = 64, run.model.n_layers = 1, run.model.n_heads = 4, run.model.max_seq_len = 32;
  run.model.vocab_size = tok.vocab_size();
  run.model.position = PositionKind::T5, run.model.norm = NormKind::RMSNorm, run.model.bias = false;
  run.data.task = Task::Seq2Seq, run.data.train = {slice.string()}, run.data.valid_fraction = 0.1;
  run.data.batch_size = 16, run.data.seq_len = 32, run.data.max_target_len = 32;
  run.train.steps = 60, run.train.schedule = {.kind = train::ScheduleKind::Cosine, .lr = 3e-3, .warmup_steps = 5, .min_lr = 3e-4};
  SmokeRun smoke = train_smoke(run, tok, "g2p");
  const std::vector<double>& losses = smoke.losses;
  EXPECT_LT(losses.back(), 0.6 * losses.front()) << "first " << losses.front() << ", last " << losses.back();
  // Decode a few training words and score them: the numbers are rates.
  GenerateOptions options{.max_new_tokens = 12, .sampling = {.greedy = true}, .eos = {*tok.special_id(SpecialRole::Sep)},
                          .decoder_start = tok.special_id(SpecialRole::Cls)};
  std::vector<std::vector<int32_t>> sources;
  std::vector<std::vector<std::vector<std::string>>> refs;
  auto words = [](const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> w;
    for (std::string x; in >> x;) w.push_back(x);
    return w;
  };
  std::istringstream lines(read_file(slice));
  std::string line;
  for (int i = 0; i < 8 && std::getline(lines, line); ++i) {
    sources.push_back(tok.encode(line.substr(0, line.find('\t'))));
    refs.push_back({words(line.substr(line.find('\t') + 1))});
  }
  auto transcribe = [&](Model& model) {
    std::vector<std::vector<std::string>> hyps;
    for (const Generation& g : generate_batch(model, &tok, sources, options)) hyps.push_back(words(g.text));
    return hyps;
  };
  const auto hyps = transcribe(smoke.trainer->model());
  const TranscriptionScore s = score_transcriptions(hyps, refs);
  // The counts, from the words themselves: one reference each, so the tokens are its phonemes and a word is
  // wrong unless its output equals it.
  int64_t phonemes = 0, wrong = 0;
  for (size_t w = 0; w < refs.size(); ++w) phonemes += static_cast<int64_t>(refs[w][0].size()), wrong += hyps[w] != refs[w][0];
  EXPECT_EQ(s.tokens, phonemes);
  EXPECT_EQ(s.wrong_words, wrong);
  // Training helped: fewer phoneme errors than the same model untrained (60 steps are far from saying the right
  // phonemes: it still says too many, PER about 1.3, against about twice that untrained).
  Model fresh(run.model);
  const TranscriptionScore untrained = score_transcriptions(transcribe(fresh), refs);
  EXPECT_LT(s.per, untrained.per) << "trained " << s.per << ", untrained " << untrained.per;
}

// Spam filtering: 300 SpamAssassin messages (both classes), a BERT-style encoder pre-trained with MLM on
// their text for 20 steps, then a classifier started from it (train.init_from) for 40 steps; the loss falls.
TEST(Tasks, SpamClassificationSmoke) {
  ATTEND_SKIP_WITHOUT_DATA("spam/train.tsv");
  std::istringstream in(read_file(kData / "spam" / "train.tsv"));
  std::string all, line;
  int spam = 0, ham = 0;
  while (std::getline(in, line) && spam + ham < 300) {
    const bool is_spam = line.starts_with("spam\t");
    if ((is_spam ? spam : ham) >= 150) continue;
    ++(is_spam ? spam : ham);
    all += line + "\n";
  }
  ASSERT_EQ(spam, 150);
  const fs::path slice = fs::temp_directory_path() / "attend_spam.tsv";
  write_file_atomic(slice, all);
  Tokenizer tok = Tokenizer::train({slice}, {.kind = TokenizerKind::WordPiece, .vocab_size = 1000, .lowercase = true});
  RunConfig run;
  run.model.architecture = Architecture::Encoder;
  run.model.d_model = 64, run.model.n_layers = 1, run.model.n_heads = 4, run.model.max_seq_len = 64;
  run.model.vocab_size = tok.vocab_size(), run.model.n_classes = 2, run.model.pooling = Pooling::Mean;
  run.data.task = Task::Classify, run.data.train = {slice.string()}, run.data.valid_fraction = 0.1;
  run.data.batch_size = 16, run.data.seq_len = 64;
  run.train.steps = 40, run.train.schedule = {.kind = train::ScheduleKind::Cosine, .lr = 2e-3, .warmup_steps = 4, .min_lr = 2e-4};
  // Pre-training reads the messages without their labels, one document each.
  std::string texts;
  std::istringstream messages(all);
  while (std::getline(messages, line)) texts += line.substr(line.find('\t') + 1) + "\n\n";
  const fs::path text_slice = fs::temp_directory_path() / "attend_spam.txt";
  write_file_atomic(text_slice, texts);
  RunConfig mlm = run;
  mlm.model.n_classes = 0;
  mlm.data.task = Task::MLM, mlm.data.train = {text_slice.string()}, mlm.train.steps = 20;
  SmokeRun pre = train_smoke(mlm, tok, "spam_mlm");
  EXPECT_LT(pre.losses.back(), pre.losses.front()) << "MLM: first " << pre.losses.front() << ", last " << pre.losses.back();
  const fs::path encoder = run_dir("spam_encoder");
  save_model(pre.trainer->model(), encoder);
  run.train.init_from = encoder.string();
  SmokeRun smoke = train_smoke(run, tok, "spam");
  const std::vector<double>& losses = smoke.losses;
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += losses[i], last += losses[losses.size() - 1 - i];
  EXPECT_LT(last, first) << "the loss did not fall";
  EXPECT_TRUE(std::isfinite(smoke.trainer->validation_loss()));
}

}  // namespace
}  // namespace attend
