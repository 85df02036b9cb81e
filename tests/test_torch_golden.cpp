// The fp64 kernels against PyTorch 1.13 in float64 (tests/data/kernels_golden.json, made by
// tools/make_kernel_fixtures.py): values and the gradients of Σ up ⊙ output.
#include "kernels/activation.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/position.h"
#include "kernels/similarity.h"
#include "kernels/softmax.h"
#include "testing.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace attend::kernels {
namespace {

// Both sides compute in float64; differences are summation order only.
constexpr double kGoldenTolerance = 1e-10;

class TorchGolden : public ::testing::Test {
 protected:
  static const nlohmann::json& cases() {
    static const nlohmann::json all = [] {
      std::ifstream in(ATTEND_TEST_DATA "/kernels_golden.json");
      if (!in) throw std::runtime_error("cannot open " ATTEND_TEST_DATA "/kernels_golden.json");
      return nlohmann::json::parse(in);
    }();
    return all.at("cases");
  }
  static std::vector<double> input(const std::string& c, const std::string& name) {
    return cases().at(c).at("inputs").at(name).get<std::vector<double>>();
  }
  static std::vector<double> output(const std::string& c, const std::string& name = "out") {
    return cases().at(c).at("outputs").at(name).get<std::vector<double>>();
  }
  static std::vector<double> grad(const std::string& c, const std::string& name) {
    return cases().at(c).at("grads").at(name).get<std::vector<double>>();
  }
  static std::vector<int32_t> ints(const std::string& c, const std::string& name) {
    return cases().at(c).at("ints").at(name).get<std::vector<int32_t>>();
  }
  static void expect(const std::vector<double>& actual, const std::vector<double>& expected, const std::string& what) {
    testing::expect_all_close(actual, expected, kGoldenTolerance, what);
  }
};

constexpr int64_t N = 7, C = 13, V = 11, OC = 5;

TEST_F(TorchGolden, Linear) {
  auto x = input("linear", "x"), w = input("linear", "weight"), b = input("linear", "bias"), up = input("linear", "up_out");
  std::vector<double> out(N * OC), dx(N * C), dw(OC * C), db(OC);
  matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  matmul_backward(dx.data(), dw.data(), db.data(), up.data(), x.data(), w.data(), N, C, OC);
  expect(out, output("linear"), "out");
  expect(dx, grad("linear", "x"), "dx");
  expect(dw, grad("linear", "weight"), "dweight");
  expect(db, grad("linear", "bias"), "dbias");
}

TEST_F(TorchGolden, Embedding) {
  auto table = input("embedding", "table"), up = input("embedding", "up_out");
  auto ids = ints("embedding", "ids");
  std::vector<double> out(N * C), dtable(V * C);
  embedding_forward(out.data(), ids.data(), table.data(), N, C);
  embedding_backward(dtable.data(), up.data(), ids.data(), N, C);
  expect(out, output("embedding"), "out");
  expect(dtable, grad("embedding", "table"), "dtable");
}

TEST_F(TorchGolden, LayerNormAndRMSNorm) {
  auto x = input("layer_norm", "x"), w = input("layer_norm", "weight"), b = input("layer_norm", "bias");
  auto up = input("layer_norm", "up_out");
  std::vector<double> out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
  layernorm_backward(dx.data(), dw.data(), db.data(), up.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  expect(out, output("layer_norm"), "layer_norm out");
  expect(dx, grad("layer_norm", "x"), "layer_norm dx");
  expect(dw, grad("layer_norm", "weight"), "layer_norm dweight");
  expect(db, grad("layer_norm", "bias"), "layer_norm dbias");

  x = input("rms_norm", "x"), w = input("rms_norm", "weight"), up = input("rms_norm", "up_out");
  std::vector<double> rdx(N * C), rdw(C);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
  rmsnorm_backward(rdx.data(), rdw.data(), up.data(), x.data(), w.data(), rstd.data(), N, C);
  expect(out, output("rms_norm"), "rms_norm out");
  expect(rdx, grad("rms_norm", "x"), "rms_norm dx");
  expect(rdw, grad("rms_norm", "weight"), "rms_norm dweight");
}

TEST_F(TorchGolden, SoftmaxLogSoftmaxLogSumExp) {
  auto z = input("softmax_t0.7", "z"), up = input("softmax_t0.7", "up_out");
  std::vector<double> p(N * V), dz(N * V);
  softmax_forward(p.data(), z.data(), N, V, 0.7);
  softmax_backward(dz.data(), up.data(), p.data(), N, V, 0.7);
  expect(p, output("softmax_t0.7"), "softmax");
  expect(dz, grad("softmax_t0.7", "z"), "softmax dz");

  z = input("log_softmax", "z"), up = input("log_softmax", "up_out");
  std::fill(dz.begin(), dz.end(), 0.0);
  log_softmax_forward(p.data(), z.data(), N, V);
  log_softmax_backward(dz.data(), up.data(), p.data(), N, V);
  expect(p, output("log_softmax"), "log_softmax");
  expect(dz, grad("log_softmax", "z"), "log_softmax dz");

  z = input("logsumexp", "z"), up = input("logsumexp", "up_out");
  std::vector<double> lse(N);
  std::fill(dz.begin(), dz.end(), 0.0);
  logsumexp_forward(lse.data(), z.data(), N, V);
  logsumexp_backward(dz.data(), up.data(), z.data(), lse.data(), N, V);
  expect(lse, output("logsumexp"), "logsumexp");
  expect(dz, grad("logsumexp", "z"), "logsumexp dz");
}

TEST_F(TorchGolden, CrossEntropyWithLabelSmoothingMatchesPyTorchConvention) {
  auto z = input("cross_entropy_ls0.1", "z"), up = input("cross_entropy_ls0.1", "up_out");
  auto targets = ints("cross_entropy_ls0.1", "targets");
  std::vector<double> losses(N), lse(N), dz(N * V);
  cross_entropy_forward(losses.data(), lse.data(), z.data(), targets.data(), N, V, 0.1, -100);
  cross_entropy_backward(dz.data(), up.data(), z.data(), lse.data(), targets.data(), N, V, 0.1, -100);
  expect(losses, output("cross_entropy_ls0.1"), "losses");
  expect(dz, grad("cross_entropy_ls0.1", "z"), "dlogits");
}

TEST_F(TorchGolden, Activations) {
  const std::pair<const char*, Activation> kinds[] = {
      {"act_relu", Activation::ReLU}, {"act_gelu", Activation::GELU},
      {"act_gelu_tanh", Activation::GELUTanh}, {"act_silu", Activation::SiLU}};
  for (auto [name, kind] : kinds) {
    auto x = input(name, "x"), up = input(name, "up_out");
    std::vector<double> out(x.size()), dx(x.size());
    activation_forward(kind, out.data(), x.data(), N * C);
    activation_backward(kind, dx.data(), up.data(), x.data(), N * C);
    expect(out, output(name), std::string(name) + " out");
    expect(dx, grad(name, "x"), std::string(name) + " dx");
  }
  auto gate = input("swiglu", "gate"), upv = input("swiglu", "up_in"), dout = input("swiglu", "up_out");
  std::vector<double> out(N * C), dgate(N * C), dup(N * C);
  gated_forward(Activation::SiLU, out.data(), gate.data(), upv.data(), N * C);
  gated_backward(Activation::SiLU, dgate.data(), dup.data(), dout.data(), gate.data(), upv.data(), N * C);
  expect(out, output("swiglu"), "swiglu out");
  expect(dgate, grad("swiglu", "gate"), "swiglu dgate");
  expect(dup, grad("swiglu", "up_in"), "swiglu dup");
}

TEST_F(TorchGolden, CosineSimilarityAndEuclideanDistance) {
  auto a = input("cosine_similarity", "a"), b = input("cosine_similarity", "b"), up = input("cosine_similarity", "up_out");
  std::vector<double> out(N), da(N * C), db(N * C);
  cosine_similarity_forward(out.data(), a.data(), b.data(), N, C);
  cosine_similarity_backward(da.data(), db.data(), up.data(), a.data(), b.data(), N, C);
  expect(out, output("cosine_similarity"), "cosine");
  expect(da, grad("cosine_similarity", "a"), "cosine da");
  expect(db, grad("cosine_similarity", "b"), "cosine db");

  a = input("euclidean_distance", "a"), b = input("euclidean_distance", "b"), up = input("euclidean_distance", "up_out");
  std::fill(da.begin(), da.end(), 0.0);
  std::fill(db.begin(), db.end(), 0.0);
  euclidean_distance_forward(out.data(), a.data(), b.data(), N, C);
  euclidean_distance_backward(da.data(), db.data(), up.data(), a.data(), b.data(), N, C);
  expect(out, output("euclidean_distance"), "distance");
  expect(da, grad("euclidean_distance", "a"), "distance da");
  expect(db, grad("euclidean_distance", "b"), "distance db");
}

TEST_F(TorchGolden, RopeOnConsecutivePairs) {
  const int64_t B = 2, T = 7, H = 3, D = 8;
  auto x = input("rope_start5", "x"), up = input("rope_start5", "up_out");
  std::vector<double> cos_t(T * D / 2), sin_t(T * D / 2), out(x.size()), dx(x.size());
  rope_tables(cos_t.data(), sin_t.data(), 5, T, D, RopeScaling{});
  rope_forward(out.data(), x.data(), cos_t.data(), sin_t.data(), B, T, H, D);
  rope_backward(dx.data(), up.data(), cos_t.data(), sin_t.data(), B, T, H, D);
  expect(out, output("rope_start5"), "rope out");
  expect(dx, grad("rope_start5", "x"), "rope dx");
}

TEST_F(TorchGolden, T5RelativeBuckets) {
  auto rel = ints("t5_buckets", "relative");
  const std::tuple<const char*, bool, int32_t, int32_t> configs[] = {
      {"bidirectional_32_128", true, 32, 128}, {"causal_32_128", false, 32, 128}, {"bidirectional_8_16", true, 8, 16}};
  for (auto [name, bidirectional, buckets, max_distance] : configs) {
    auto expected = ints("t5_buckets", name);
    for (size_t i = 0; i < rel.size(); ++i)
      ASSERT_EQ(t5_relative_bucket(rel[i], bidirectional, buckets, max_distance), expected[i])
          << name << " at relative position " << rel[i];
  }
}

TEST_F(TorchGolden, SinusoidalTable) {
  std::vector<double> pe(9 * 12);
  sinusoidal_table(pe.data(), 0, 9, 12, 10000.0);
  expect(pe, output("sinusoidal_9x12"), "sinusoidal");
}

}  // namespace
}  // namespace attend::kernels
