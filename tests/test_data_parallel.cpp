// Data parallelism without MPI: ranks as threads of this process (attend::local_group), so that the
// collectives, the bucketed reduction, ZeRO-1's sharded optimizer and the trainer's steps are checked here
// and under the sanitizers. tests/mpi/ runs the same through mpirun, on one host and across two network
// namespaces.
#include "testing.h"
#include "train/collective.h"
#include "train/optimizer.h"

#include <attend/distributed.h>
#include <attend/error.h>
#include <attend/io.h>
#include <attend/model.h>
#include <attend/rng.h>
#include <attend/safetensors.h>
#include <attend/train.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <thread>

namespace attend {
namespace {

namespace fs = std::filesystem;

// Runs f(rank, communicator) on one thread per rank; rethrows the first failure.
void on_ranks(int n, const std::function<void(int, Communicator&)>& f) {
  auto group = local_group(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        f(r, *group[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

float bf16_round(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fff + ((bits >> 16) & 1);  // to nearest, ties to even (no NaN here)
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

std::vector<float> random_values(uint64_t seed, int64_t n) {
  Rng rng(seed);
  std::vector<float> out(n);
  for (float& x : out) x = static_cast<float>(rng.normal());
  return out;
}

TEST(DataParallel, SmallSumsAddInRankOrderOnEveryRank) {
  // 1 + 1e16 − 1e16 is 0 in this order and 1 in others: every rank must get 0.
  const double values[3] = {1.0, 1e16, -1e16};
  on_ranks(3, [&](int rank, Communicator& group) {
    double v[2] = {values[rank], double(rank)};
    train::sum_in_rank_order(group, v);
    EXPECT_EQ(v[0], 0.0) << "rank " << rank;
    EXPECT_EQ(v[1], 3.0);
    std::string text = train::broadcast(group, rank == 0 ? std::string("from rank 0") : std::string());
    EXPECT_EQ(text, "from rank 0");
    barrier(group);
  });
}

struct ReducerCase {
  int ranks;
  int64_t bucket;
  bool bf16, zero;
};

class Reducer : public ::testing::TestWithParam<ReducerCase> {};

// Every element of the sum is Σ_p g_p added in rank order (each g_p rounded to bf16 first, and the sum once
// more, on the bf16 wire): bit for bit, whatever the buckets and the order their transfers finish in.
TEST_P(Reducer, SumsEveryBucketInRankOrder) {
  const ReducerCase c = GetParam();
  constexpr int64_t n = 1000;
  std::vector<std::vector<float>> grads;
  for (int r = 0; r < c.ranks; ++r) grads.push_back(random_values(100 + r, n));
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < c.ranks; ++r) {
      const float g = c.bf16 ? bf16_round(grads[r][i]) : grads[r][i];
      sum = r == 0 ? g : sum + g;
    }
    want[i] = c.bf16 ? bf16_round(sum) : sum;
  }
  std::vector<std::vector<train::Range>> owned(c.ranks);
  std::vector<std::vector<float>> values(c.ranks, std::vector<float>(n, -1.0f));
  on_ranks(c.ranks, [&](int rank, Communicator& group) {
    train::GradientReducer reducer(group, n, {.zero = c.zero, .bf16_wire = c.bf16, .bucket_elements = c.bucket});
    std::vector<float> g = grads[rank];
    reducer.start(g);
    for (int64_t from = n - 97; from > 0; from -= 97) reducer.ready(from);  // backward's blocks, last first
    reducer.finish();
    owned[rank] = reducer.owned();
    for (const train::Range& range : reducer.owned())
      for (int64_t i = range.begin; i < range.end; ++i) ASSERT_EQ(g[i], want[i]) << "rank " << rank << " at " << i;
    if (!c.zero) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(g[i], want[i]) << "rank " << rank << " at " << i;
    }
    const train::ReducerStats stats = reducer.take_stats();
    // Each rank sends (N−1)/N of the buffer twice (reduce, then gather), or once under ZeRO-1.
    const double expected = double(n) * (c.ranks - 1) / c.ranks * (c.zero ? 1 : 2) * (c.bf16 ? 2 : 4);
    EXPECT_NEAR(double(stats.bytes_sent), expected, 16.0 * 4 * c.ranks * reducer.buckets());
    // ZeRO-1's parameter gather: each rank's owned ranges reach every rank.
    for (const train::Range& range : reducer.owned())
      for (int64_t i = range.begin; i < range.end; ++i) values[rank][i] = float(rank) + float(i) / n;
    reducer.gather_values(values[rank]);
  });
  std::vector<int> owner(n, -1);
  for (int r = 0; r < c.ranks; ++r)
    for (const train::Range& range : owned[r])
      for (int64_t i = range.begin; i < range.end; ++i) {
        ASSERT_EQ(owner[i], -1) << "element " << i << " owned twice";
        owner[i] = r;
      }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NE(owner[i], -1) << "element " << i << " owned by no rank";
    for (int r = 0; r < c.ranks; ++r) ASSERT_EQ(values[r][i], float(owner[i]) + float(i) / n) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Reducer,
                         ::testing::Values(ReducerCase{2, 0, false, false}, ReducerCase{2, 100, false, false},
                                           ReducerCase{3, 7, false, false}, ReducerCase{3, 100, true, false},
                                           ReducerCase{2, 100, false, true}, ReducerCase{3, 33, true, true},
                                           ReducerCase{4, 250, false, true}));

ModelConfig tiny(Architecture a) {
  ModelConfig c;
  c.architecture = a;
  c.vocab_size = 24, c.d_model = 16, c.n_layers = 3, c.n_heads = 2, c.max_seq_len = 16;
  c.seed = 5;
  if (a == Architecture::EncoderDecoder) {
    c.position = PositionKind::T5, c.norm = NormKind::RMSNorm, c.n_decoder_layers = 2;
  }
  if (a == Architecture::Encoder) c.n_classes = 3, c.pooler = true, c.type_vocab_size = 2, c.tie_embeddings = true;
  return c;
}

Batch random_batch(const ModelConfig& c, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.B = 3, b.T = 8;
  for (int64_t i = 0; i < b.B * b.T; ++i) {
    b.ids.push_back(1 + static_cast<int32_t>(rng.below(c.vocab_size - 1)));
    b.targets.push_back(1 + static_cast<int32_t>(rng.below(c.vocab_size - 1)));
  }
  if (c.architecture == Architecture::Encoder) {
    b.targets.clear();
    b.labels = {0, 2, 1};
    b.lengths = {8, 5, 3};
  }
  if (c.architecture == Architecture::EncoderDecoder) {
    b.src_T = 6;
    for (int64_t i = 0; i < b.B * b.src_T; ++i) b.src_ids.push_back(1 + static_cast<int32_t>(rng.below(c.vocab_size - 1)));
    b.src_lengths = {6, 4, 2};
  }
  return b;
}

// Backward's hook says which gradients are final: at each call, everything from the offset on already has
// the value it ends with, for each family (T5's relative bias, shared from block 0, and the encoder under
// the decoder's cross-attention included). One call per block, with offsets going down.
TEST(DataParallel, BackwardReportsFinalGradientsBlockByBlock) {
  for (Architecture a : {Architecture::Decoder, Architecture::Encoder, Architecture::EncoderDecoder}) {
    SCOPED_TRACE(architecture_name(a));
    const ModelConfig c = tiny(a);
    Model model(c);
    const Batch b = random_batch(c, 1);
    model.zero_grad();
    std::vector<std::pair<int64_t, std::vector<float>>> seen;
    ForwardState state;
    model.forward(b, state, {.training = true});
    const std::span<float> grads = model.gradient_buffer();
    model.backward(state, 1.0, [&](int64_t from) {
      seen.emplace_back(from, std::vector<float>(grads.begin() + from, grads.end()));
    });
    const int64_t blocks = a == Architecture::EncoderDecoder ? c.n_layers + c.n_decoder_layers : c.n_layers;
    ASSERT_EQ(static_cast<int64_t>(seen.size()), blocks);
    for (size_t k = 0; k < seen.size(); ++k) {
      if (k > 0) {
        EXPECT_LT(seen[k].first, seen[k - 1].first);
      }
      const std::vector<float>& then = seen[k].second;
      for (size_t i = 0; i < then.size(); ++i)
        ASSERT_EQ(then[i], grads[seen[k].first + i]) << "call " << k << ", offset " << seen[k].first + i;
    }
    EXPECT_GT(seen.back().first, 0) << "the embeddings come last";
  }
}

TEST(Datasets, SharesOfAMicroBatchAreItsRows) {
  std::vector<int32_t> tokens(3000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % 23);
  LmDataset lm(tokens, {}, {.batch_size = 5, .seq_len = 8, .seed = 2});
  std::vector<Example> examples;
  for (int i = 0; i < 40; ++i)
    examples.push_back({std::vector<int32_t>(1 + i % 7, 3), std::vector<int32_t>(1 + i % 5, 4), i % 3});
  ExampleDataset s2s(ExampleDataset::Kind::Seq2Seq, examples, {}, {.batch_size = 5, .bos_id = 1, .eos_id = 2});
  ExampleDataset classify(ExampleDataset::Kind::Classify, examples, {}, {.batch_size = 5});
  MlmDataset mlm(tokens, {}, {.batch_size = 5, .seq_len = 8, .seed = 2, .mask_id = 1, .vocab_size = 23,
                              .special_ids = {0, 1}});
  for (const Dataset* d : {static_cast<const Dataset*>(&lm), static_cast<const Dataset*>(&s2s),
                           static_cast<const Dataset*>(&classify), static_cast<const Dataset*>(&mlm)})
    for (int parts : {1, 2, 3})
      for (int64_t i : {0, 7}) {
        const Batch whole = d->train_batch(i);
        int64_t row = 0;
        for (int part = 0; part < parts; ++part) {
          const Batch share = d->train_share(i, part, parts);
          const Batch rows = batch_rows(whole, row, row + share.B);
          EXPECT_EQ(share.T, whole.T);
          EXPECT_EQ(share.ids, rows.ids);
          EXPECT_EQ(share.targets, rows.targets);
          EXPECT_EQ(share.lengths, rows.lengths);
          EXPECT_EQ(share.src_ids, rows.src_ids);
          EXPECT_EQ(share.src_lengths, rows.src_lengths);
          EXPECT_EQ(share.labels, rows.labels);
          EXPECT_EQ(share.src_T, whole.src_T);
          row += share.B;
        }
        EXPECT_EQ(row, whole.B) << parts << " parts";
      }
}

TEST(Optimizers, SegmentsUpdateTheirElementsAsTheWholeDoes) {
  Model a(tiny(Architecture::Decoder)), b(tiny(Architecture::Decoder));
  // b's parameters cut into runs at odd places, as ZeRO-1's chunks cut them.
  auto runs_of = [](Model& m) {
    std::vector<train::Segment> out;
    for (Parameter* p : m.parameters())
      for (int64_t at = 0; at < p->numel(); at += 37) out.push_back({p, at, std::min<int64_t>(37, p->numel() - at)});
    return out;
  };
  const std::vector<train::Segment> segments = runs_of(b);
  train::OptimizerConfig config;
  config.weight_decay = 0.1;
  train::Optimizer whole(config, a.parameters()), parts(config, segments);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = random_values(step, static_cast<int64_t>(a.gradient_buffer().size()));
    std::ranges::copy(g, a.gradient_buffer().begin());
    std::ranges::copy(g, b.gradient_buffer().begin());
    whole.step(1e-2);
    parts.step(1e-2);
  }
  const auto va = a.parameter_buffer(), vb = b.parameter_buffer();
  for (size_t i = 0; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << i;
  // The state moves between the two layouts unchanged.
  EXPECT_EQ(whole.pack(runs_of(a)), parts.pack(parts.segments()));
  const fs::path file = fs::temp_directory_path() / "attend_test_segments.safetensors";
  write_safetensors(file, whole.state_tensors(), whole.state_metadata());
  train::Optimizer loaded(config, segments);
  loaded.load_state(SafetensorsReader(file));
  EXPECT_EQ(loaded.pack(loaded.segments()), parts.pack(parts.segments()));
  EXPECT_EQ(loaded.steps(), 3);
  testing::expect_error_mentions<Error>([&] { parts.state_tensors(); }, {"whole state"});
}

// ---- The trainer on several ranks against one process ------------------------------------------------

std::vector<int32_t> pattern_tokens(int n = 3000) {
  Rng rng(4);
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < n) {
    for (int32_t t = 1; t <= 9; ++t) out.push_back(t);
    out.push_back(10 + static_cast<int32_t>(rng.below(10)));
  }
  return out;
}

std::vector<Example> reversal_examples(uint64_t seed, int n) {
  Rng rng(seed);
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) {
    Example e;
    const int len = 2 + static_cast<int>(rng.below(6));
    for (int k = 0; k < len; ++k) e.source.push_back(3 + static_cast<int32_t>(rng.below(20)));
    e.target.assign(e.source.rbegin(), e.source.rend());
    out.push_back(e);
  }
  return out;
}

TrainConfig parallel_config(int64_t steps) {
  TrainConfig c;
  c.steps = steps;
  c.schedule = {.kind = train::ScheduleKind::Cosine, .lr = 3e-3, .warmup_steps = 2, .total_steps = 12, .min_lr = 3e-4};
  c.optimizer.weight_decay = 0.1;
  c.clip_norm = 0.5;  // binds: the clipping factor comes from the norm over every rank's gradients
  c.grad_accum = 2;
  c.eval_every = 4;
  c.checkpoint_every = 0;
  return c;
}

struct RunResult {
  std::vector<StepReport> steps;
  std::vector<float> weights;
  bool zero = false;  // the run split its optimizer state (Trainer::zero)
};

// Trains config on `ranks` threads (1: a plain single process, no group at all) and returns rank 0's reports.
// `frozen`, when given, picks the parameters each rank's model freezes.
RunResult train_on(int ranks, const ModelConfig& model, const Dataset& data, const TrainConfig& config, const fs::path& dir,
             bool resume = false, const std::function<bool(const Parameter&)>& frozen = {}) {
  RunResult out;
  auto one = [&](Communicator* group) {
    const bool leader = group == nullptr || group->rank() == 0;
    Model m(model);
    if (frozen) m.freeze(frozen);
    Trainer trainer(std::move(m), data, config, leader ? dir : dir / "unused", resume, nullptr, group);
    std::vector<StepReport> reports;
    trainer.run([&](const StepReport& r) { reports.push_back(r); });
    if (leader) {
      out.steps = reports;
      out.zero = trainer.zero();
      auto w = trainer.model().parameter_buffer();
      out.weights.assign(w.begin(), w.end());
    }
  };
  if (ranks == 1) {
    one(nullptr);
  } else {
    on_ranks(ranks, [&](int, Communicator& group) { one(&group); });
  }
  return out;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attend_test_dp_" + name);
  fs::remove_all(dir);
  return dir;
}

struct TrainCase {
  Task task;
  int ranks;
  bool zero, bf16;
  Precision precision = Precision::F32;
};

class DataParallelTrainer : public ::testing::TestWithParam<TrainCase> {};

// N ranks, each training on its share of every micro-batch, follow the single process's run with the same
// global batch. The only difference is the order of fp32 additions (each rank sums its rows' gradients,
// then the ranks' sums are added), a few ulps per step; the bound is 1e-6 of the loss per step, and
// it holds with three orders of magnitude to spare (differences of ~1e-9 here and through mpirun).
TEST_P(DataParallelTrainer, FollowsTheSingleProcessRun) {
  const TrainCase t = GetParam();
  const std::string name = fmt::format("{}_{}_{}_{}", task_name(t.task), t.ranks, t.zero, t.bf16);
  TrainConfig config = parallel_config(12);
  config.zero = t.zero;
  config.allreduce = t.bf16 ? Precision::BF16 : Precision::F32;
  config.bucket_mb = 0.004;  // 1,000 floats a bucket: many buckets, most started during backward
  std::unique_ptr<Dataset> data;
  ModelConfig model;
  if (t.task == Task::LM) {
    const auto tokens = pattern_tokens();
    data = std::make_unique<LmDataset>(tokens, std::vector<int32_t>(tokens.begin(), tokens.begin() + 400),
                                       LmDataOptions{.batch_size = 6, .seq_len = 12, .seed = 3});
    model = tiny(Architecture::Decoder);
  } else if (t.task == Task::MLM) {
    const auto tokens = pattern_tokens();
    data = std::make_unique<MlmDataset>(tokens, std::vector<int32_t>(tokens.begin(), tokens.begin() + 400),
                                        MlmOptions{.batch_size = 6, .seq_len = 12, .seed = 3, .mask_id = 2,
                                                   .vocab_size = 24, .special_ids = {0, 2}});
    model = tiny(Architecture::Encoder);
    model.n_classes = 0, model.pooler = false, model.mlm_head = true;
  } else if (t.task == Task::Classify) {
    std::vector<Example> examples = reversal_examples(1, 200), valid = reversal_examples(2, 20);
    for (auto* set : {&examples, &valid})
      for (Example& e : *set) e.label = e.source[0] % 3;  // the class of the first token
    data = std::make_unique<ExampleDataset>(ExampleDataset::Kind::Classify, examples, valid,
                                            ExampleOptions{.batch_size = 6, .seed = 3});
    model = tiny(Architecture::Encoder);
  } else {
    data = std::make_unique<ExampleDataset>(ExampleDataset::Kind::Seq2Seq, reversal_examples(1, 200),
                                            reversal_examples(2, 20),
                                            ExampleOptions{.batch_size = 6, .seed = 3, .bos_id = 1, .eos_id = 2});
    model = tiny(Architecture::EncoderDecoder);
  }
  config.precision = t.precision;
  config.loss_scale_window = 3;  // f16: the scale doubles during the run, on every rank alike
  const RunResult one = train_on(1, model, *data, config, fresh_dir(name + "_one"));
  const RunResult many = train_on(t.ranks, model, *data, config, fresh_dir(name + "_many"));
  ASSERT_EQ(one.steps.size(), many.steps.size());
  // bf16 on the wire rounds every gradient to 8 bits of mantissa: the run is another run, close but not equal.
  // Mixed precision rounds the weights to 16 bits at every matmul: weights that differ by an fp32 ulp after
  // one step round apart wherever they lie near a 16-bit rounding boundary, and the runs drift apart by
  // chance (about 1% after six steps here). Even the first forward rounds activations to 16 bits, where a
  // row's fp32 value can differ by an ulp with the GEMM's blocking for fewer rows: a flipped rounding moves
  // the loss by ~1e-5 (1e-3 is the bound). The bf16 wire's first loss comes before any exchange: exact.
  const bool exact = !t.bf16 && t.precision == Precision::F32;
  const double bound = exact ? 1e-6 : 5e-2;
  const double first = t.precision == Precision::F32 ? 1e-6 : 1e-3;
  EXPECT_NEAR(many.steps[0].loss, one.steps[0].loss, first * one.steps[0].loss) << "the first step";
  for (size_t i = 0; i < one.steps.size(); ++i) {
    const StepReport &a = one.steps[i], &b = many.steps[i];
    EXPECT_NEAR(b.loss, a.loss, bound * a.loss) << "step " << a.step;
    EXPECT_EQ(b.tokens, a.tokens) << "step " << a.step;
    if (exact) {
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm) << "step " << a.step;
    }
    ASSERT_EQ(a.val_loss.has_value(), b.val_loss.has_value());
    if (a.val_loss) {
      EXPECT_NEAR(*b.val_loss, *a.val_loss, bound * *a.val_loss) << "step " << a.step;
    }
    EXPECT_GT(b.comm_bytes, 0);
    EXPECT_EQ(b.loss_scale, a.loss_scale) << "step " << a.step;  // f16: the same overflows on the same steps
    EXPECT_EQ(b.skipped, a.skipped) << "step " << a.step;
  }
  EXPECT_LT(many.steps.back().loss, many.steps.front().loss) << "it learns";
}

INSTANTIATE_TEST_SUITE_P(Cases, DataParallelTrainer,
                         ::testing::Values(TrainCase{Task::LM, 2, false, false}, TrainCase{Task::LM, 2, true, false},
                                           TrainCase{Task::LM, 3, true, false}, TrainCase{Task::LM, 2, false, true},
                                           TrainCase{Task::Seq2Seq, 2, false, false},
                                           TrainCase{Task::Seq2Seq, 3, true, false},
                                           TrainCase{Task::MLM, 2, true, false},
                                           TrainCase{Task::Classify, 2, false, false},
                                           TrainCase{Task::LM, 2, true, false, Precision::BF16},
                                           TrainCase{Task::LM, 2, false, false, Precision::F16}),
                         [](const auto& info) {
                           const TrainCase& t = info.param;
                           return fmt::format("{}_{}ranks{}{}{}", task_name(t.task), t.ranks, t.zero ? "_zero" : "",
                                              t.bf16 ? "_bf16" : "",
                                              t.precision == Precision::F32 ? ""
                                              : t.precision == Precision::BF16 ? "_bf16_matmuls"
                                                                               : "_f16_matmuls");
                         });

// A checkpoint holds the whole state, ZeRO-1's shards gathered: resuming on the same ranks continues bit for
// bit, and another number of ranks continues the same run (up to the order of additions).
TEST(DataParallel, ResumesBitForBitAndOnAnotherNumberOfRanks) {
  const auto tokens = pattern_tokens();
  LmDataset data(tokens, std::vector<int32_t>(tokens.begin(), tokens.begin() + 400),
                 {.batch_size = 6, .seq_len = 12, .seed = 3});
  const ModelConfig model = tiny(Architecture::Decoder);
  TrainConfig config = parallel_config(10);
  config.zero = true;
  config.bucket_mb = 0.004;
  config.schedule.total_steps = 10;
  const fs::path straight_dir = fresh_dir("resume_straight");
  const RunResult straight = train_on(2, model, data, config, straight_dir);

  TrainConfig first = config;
  first.steps = 5;
  const fs::path dir = fresh_dir("resume_two"), other = fresh_dir("resume_one");
  const RunResult head = train_on(2, model, data, first, dir);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(head.steps[i].loss, straight.steps[i].loss) << "step " << i + 1;
  fs::copy(dir, other, fs::copy_options::recursive);
  const RunResult resumed = train_on(2, model, data, config, dir, /*resume=*/true);
  ASSERT_EQ(resumed.steps.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(resumed.steps[i].loss, straight.steps[5 + i].loss) << "step " << 6 + i;
  EXPECT_EQ(resumed.weights, straight.weights);
  const std::string a = read_file(straight_dir / "checkpoint" / "optimizer.safetensors");
  const std::string b = read_file(dir / "checkpoint" / "optimizer.safetensors");
  EXPECT_TRUE(a == b) << "the gathered optimizer state is the uninterrupted run's, byte for byte";

  for (int ranks : {1, 3}) {
    const fs::path d = fresh_dir(fmt::format("resume_on_{}", ranks));
    fs::copy(other, d, fs::copy_options::recursive);
    const RunResult moved = train_on(ranks, model, data, config, d, /*resume=*/true);
    ASSERT_EQ(moved.steps.size(), 5u);
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(moved.steps[i].loss, straight.steps[5 + i].loss, 1e-6 * straight.steps[5 + i].loss)
          << ranks << " ranks, step " << 6 + i;
  }
}

// The divergence guard sees every rank's loss and gradients: a NaN on one rank skips the step on all (no weight
// changes anywhere), and enough of them stop every rank with the same error.
TEST(DataParallel, ANonFiniteLossOnOneRankSkipsTheStepOnEveryRank) {
  const auto tokens = pattern_tokens();
  LmDataset data(tokens, {}, {.batch_size = 4, .seq_len = 12, .seed = 3});
  for (bool zero : {false, true}) {
    SCOPED_TRACE(zero ? "ZeRO-1" : "plain");
    TrainConfig config = parallel_config(20);
    config.max_bad_steps = 2;
    config.zero = zero;
    const fs::path dir = fresh_dir(fmt::format("guard_{}", zero));
    on_ranks(2, [&](int rank, Communicator& group) {
      Trainer t(Model(tiny(Architecture::Decoder)), data, config, rank == 0 ? dir : dir / "unused", false, nullptr,
                &group);
      t.step();
      Parameter* w = t.model().find("decoder.layers.0.ffn.up.weight");
      const float saved = w->value[0];
      const std::vector<float> before(t.model().parameter_buffer().begin(), t.model().parameter_buffer().end());
      if (rank == 1) w->value[0] = NAN;
      EXPECT_TRUE(t.step().skipped) << "rank " << rank;
      w->value[0] = saved;
      const std::vector<float> after(t.model().parameter_buffer().begin(), t.model().parameter_buffer().end());
      EXPECT_TRUE(after == before) << "rank " << rank << ": a skipped step changed a weight";
      EXPECT_FALSE(t.step().skipped) << "rank " << rank;
      if (rank == 1) w->value[0] = NAN;
      EXPECT_TRUE(t.step().skipped);
      testing::expect_error_mentions<Error>([&] { t.step(); }, {"training diverged", "2 steps in a row"});
    });
  }
}

// Frozen parameters (LoRA's base) have no gradients to send: the buckets cover the trainable ones, backward's
// hook reports their offsets, and the run follows one process's. ZeRO-1 refuses them, saying why.
TEST(DataParallel, TrainsOnlyTheUnfrozenParameters) {
  const auto tokens = pattern_tokens();
  LmDataset data(tokens, {}, {.batch_size = 6, .seq_len = 12, .seed = 3});
  TrainConfig config = parallel_config(8);
  config.bucket_mb = 0.002;
  auto frozen = [](const Parameter& p) { return p.name.find(".attn.") == std::string::npos; };
  auto run = [&](int ranks, const fs::path& dir) {
    return train_on(ranks, tiny(Architecture::Decoder), data, config, dir, false, frozen);
  };
  const RunResult a = run(1, fresh_dir("frozen_one")), b = run(2, fresh_dir("frozen_two"));
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) EXPECT_NEAR(b.steps[i].loss, a.steps[i].loss, 1e-6 * a.steps[i].loss);
  config.zero = true;
  testing::expect_error_mentions<Error>([&] { run(2, fresh_dir("frozen_zero")); }, {"train.zero", "frozen"});
}

// train.zero's default, "auto", is ZeRO-1 wherever it applies: on with several ranks when every parameter trains
// (the same run as asking for it, bit for bit), off with frozen parameters and in one process.
TEST(DataParallel, ZeroOneIsOnByDefaultWhereItApplies) {
  const auto tokens = pattern_tokens();
  LmDataset data(tokens, {}, {.batch_size = 6, .seq_len = 12, .seed = 3});
  TrainConfig automatic = parallel_config(4), on = automatic;
  ASSERT_FALSE(automatic.zero.has_value());
  on.zero = true;
  const ModelConfig model = tiny(Architecture::Decoder);
  const RunResult a = train_on(2, model, data, automatic, fresh_dir("zero_auto"));
  const RunResult b = train_on(2, model, data, on, fresh_dir("zero_on"));
  EXPECT_TRUE(a.zero);
  EXPECT_TRUE(b.zero);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i + 1;
  EXPECT_EQ(a.weights, b.weights);
  auto frozen = [](const Parameter& p) { return p.name.find(".attn.") == std::string::npos; };
  EXPECT_FALSE(train_on(2, model, data, automatic, fresh_dir("zero_auto_frozen"), false, frozen).zero);
  EXPECT_FALSE(train_on(1, model, data, automatic, fresh_dir("zero_auto_one")).zero);
}

// One rank's error must not leave the others waiting: the local group's abort wakes them with an error.
TEST(DataParallel, ARanksAbortStopsTheOthers) {
  EXPECT_THROW(on_ranks(2,
                        [](int rank, Communicator& group) {
                          if (rank == 1) group.abort("rank 1 failed on purpose");
                          double x = 1.0;
                          train::sum_in_rank_order(group, std::span(&x, 1));
                        }),
               Error);
}

}  // namespace
}  // namespace attend
