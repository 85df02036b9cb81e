// A finite-difference gradient check for every backward kernel: fp64, a random upstream gradient
// `up`, odd sizes (T = 7, C = 13), loss = Σ up ⊙ forward(inputs).
#include "kernels/activation.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/position.h"
#include "kernels/similarity.h"
#include "kernels/softmax.h"
#include "testing.h"

namespace attend::kernels {
namespace {

using testing::dot;
using testing::expect_gradient;
using testing::random_vector;

TEST(GradCheck, Matmul) {
  const int64_t N = 7, C = 13, OC = 5;
  auto x = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3), up = random_vector(N * OC, 4);
  std::vector<double> out(N * OC);
  auto loss = [&] {
    matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return dot(out, up);
  };
  loss();
  std::vector<double> dx(N * C), dw(OC * C), db(OC);
  matmul_backward(dx.data(), dw.data(), db.data(), up.data(), x.data(), w.data(), N, C, OC);
  expect_gradient("dinp", x, dx, loss);
  expect_gradient("dweight", w, dw, loss);
  expect_gradient("dbias", b, db, loss);
}

TEST(GradCheck, Embedding) {
  const int64_t V = 11, C = 13, N = 7;
  auto table = random_vector(V * C, 1), up = random_vector(N * C, 2);
  std::vector<int32_t> ids = {3, 0, 10, 3, 7, 3, 1};  // id 3 repeats: its gradient must accumulate
  std::vector<double> out(N * C);
  auto loss = [&] {
    embedding_forward(out.data(), ids.data(), table.data(), N, C);
    return dot(out, up);
  };
  loss();
  std::vector<double> dtable(V * C);
  embedding_backward(dtable.data(), up.data(), ids.data(), N, C);
  expect_gradient("dtable", table, dtable, loss);
}

TEST(GradCheck, SoftmaxWithTemperature) {
  const int64_t N = 7, V = 13;
  for (double temperature : {1.0, 0.5, 2.5}) {
    auto z = random_vector(N * V, 1, -3, 3), up = random_vector(N * V, 2);
    std::vector<double> p(N * V);
    auto loss = [&] {
      softmax_forward(p.data(), z.data(), N, V, temperature);
      return dot(p, up);
    };
    loss();
    std::vector<double> dz(N * V);
    softmax_backward(dz.data(), up.data(), p.data(), N, V, temperature);
    expect_gradient("dz at temperature " + std::to_string(temperature), z, dz, loss);
  }
}

TEST(GradCheck, LogSoftmax) {
  const int64_t N = 7, V = 13;
  auto z = random_vector(N * V, 1, -3, 3), up = random_vector(N * V, 2);
  std::vector<double> y(N * V);
  auto loss = [&] {
    log_softmax_forward(y.data(), z.data(), N, V);
    return dot(y, up);
  };
  loss();
  std::vector<double> dz(N * V);
  log_softmax_backward(dz.data(), up.data(), y.data(), N, V);
  expect_gradient("dz", z, dz, loss);
}

TEST(GradCheck, LogSumExp) {
  const int64_t N = 7, V = 13;
  auto z = random_vector(N * V, 1, -3, 3), up = random_vector(N, 2);
  std::vector<double> lse(N);
  auto loss = [&] {
    logsumexp_forward(lse.data(), z.data(), N, V);
    return dot(lse, up);
  };
  loss();
  std::vector<double> dz(N * V);
  logsumexp_backward(dz.data(), up.data(), z.data(), lse.data(), N, V);
  expect_gradient("dz", z, dz, loss);
}

TEST(GradCheck, CrossEntropyWithLabelSmoothingAndIgnoreIndex) {
  const int64_t N = 7, V = 13;
  const int32_t kIgnore = -100;
  std::vector<int32_t> targets = {4, 0, kIgnore, 12, 7, kIgnore, 4};
  for (double smoothing : {0.0, 0.1, 0.3}) {
    auto z = random_vector(N * V, 1, -3, 3), up = random_vector(N, 2);
    std::vector<double> losses(N), lse(N);
    auto loss = [&] {
      cross_entropy_forward(losses.data(), lse.data(), z.data(), targets.data(), N, V, smoothing, kIgnore);
      return dot(losses, up);
    };
    loss();
    EXPECT_EQ(losses[2], 0.0);
    std::vector<double> dz(N * V);
    cross_entropy_backward(dz.data(), up.data(), z.data(), lse.data(), targets.data(), N, V, smoothing, kIgnore);
    for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dz[2 * V + j], 0.0) << "ignored row got a gradient";
    expect_gradient("dlogits with smoothing " + std::to_string(smoothing), z, dz, loss);
  }
}

TEST(GradCheck, LayerNorm) {
  const int64_t N = 7, C = 13;
  auto x = random_vector(N * C, 1, -2, 3), w = random_vector(C, 2), b = random_vector(C, 3), up = random_vector(N * C, 4);
  std::vector<double> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    return dot(out, up);
  };
  loss();
  std::vector<double> dx(N * C), dw(C), db(C);
  layernorm_backward(dx.data(), dw.data(), db.data(), up.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  expect_gradient("dinp", x, dx, loss);
  expect_gradient("dweight", w, dw, loss);
  expect_gradient("dbias", b, db, loss);
}

TEST(GradCheck, RMSNorm) {
  const int64_t N = 7, C = 13;
  auto x = random_vector(N * C, 1, -2, 3), w = random_vector(C, 2), up = random_vector(N * C, 4);
  std::vector<double> out(N * C), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
    return dot(out, up);
  };
  loss();
  std::vector<double> dx(N * C), dw(C);
  rmsnorm_backward(dx.data(), dw.data(), up.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_gradient("dinp", x, dx, loss);
  expect_gradient("dweight", w, dw, loss);
}

TEST(GradCheck, Activations) {
  const int64_t n = 7 * 13;
  for (Activation a : {Activation::ReLU, Activation::GELU, Activation::GELUTanh, Activation::SiLU}) {
    // Keep inputs away from ReLU's kink at 0, where the derivative does not exist.
    auto x = random_vector(n, 1, -4, 4), up = random_vector(n, 2);
    for (double& v : x)
      if (std::abs(v) < 1e-3) v = 0.5;
    std::vector<double> out(n);
    auto loss = [&] {
      activation_forward(a, out.data(), x.data(), n);
      return dot(out, up);
    };
    loss();
    std::vector<double> dx(n);
    activation_backward(a, dx.data(), up.data(), x.data(), n);
    expect_gradient(std::string("dinp of ") + activation_name(a), x, dx, loss);
  }
}

// The gated FFN's gate with SwiGLU's SiLU and GeGLU's GELU_tanh.
TEST(GradCheck, GatedActivations) {
  const int64_t n = 7 * 13;
  for (Activation a : {Activation::SiLU, Activation::GELUTanh}) {
    auto gate = random_vector(n, 1, -4, 4), upv = random_vector(n, 2), dout = random_vector(n, 3);
    std::vector<double> out(n);
    auto loss = [&] {
      gated_forward(a, out.data(), gate.data(), upv.data(), n);
      return dot(out, dout);
    };
    loss();
    std::vector<double> dgate(n), dup(n);
    gated_backward(a, dgate.data(), dup.data(), dout.data(), gate.data(), upv.data(), n);
    expect_gradient(std::string("dgate of ") + activation_name(a), gate, dgate, loss);
    expect_gradient(std::string("dup of ") + activation_name(a), upv, dup, loss);
  }
}

TEST(GradCheck, Dropout) {
  // For a fixed (seed, offset) dropout is linear in its input, so finite differences see the mask.
  const int64_t n = 7 * 13;
  auto x = random_vector(n, 1), up = random_vector(n, 2);
  std::vector<double> out(n);
  auto loss = [&] {
    dropout_forward(out.data(), x.data(), n, 0.3f, 42, 1000);
    return dot(out, up);
  };
  loss();
  std::vector<double> dx(n);
  dropout_backward(dx.data(), up.data(), n, 0.3f, 42, 1000);
  expect_gradient("dinp", x, dx, loss);
}

TEST(GradCheck, ScaledResidual) {
  const int64_t n = 7 * 13;
  auto h = random_vector(n, 1), f = random_vector(n, 2), up = random_vector(n, 3);
  std::vector<double> out(n);
  const double alpha = 0.37;
  auto loss = [&] {
    residual_forward(out.data(), h.data(), f.data(), n, alpha);
    return dot(out, up);
  };
  loss();
  std::vector<double> dh(n), df(n);
  residual_backward(dh.data(), df.data(), up.data(), n, alpha);
  expect_gradient("dh", h, dh, loss);
  expect_gradient("df", f, df, loss);
}

TEST(GradCheck, LearnedPositions) {
  const int64_t B = 3, T = 7, C = 13;
  auto x = random_vector(B * T * C, 1), table = random_vector(T * C, 2), up = random_vector(B * T * C, 3);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    add_positions_forward(out.data(), x.data(), table.data(), B, T, C);
    return dot(out, up);
  };
  loss();
  std::vector<double> dx(B * T * C), dtable(T * C);
  add_positions_backward(dx.data(), dtable.data(), up.data(), B, T, C);
  expect_gradient("dinp", x, dx, loss);
  expect_gradient("dtable", table, dtable, loss);
}

TEST(GradCheck, RoPE) {
  const int64_t B = 2, T = 7, H = 3, D = 8;
  RopeScaling scaling;
  scaling.ntk_factor = 2.0;  // exercise a scaled variant: the rotation is the same linear map
  std::vector<double> cos_t(T * D / 2), sin_t(T * D / 2);
  rope_tables(cos_t.data(), sin_t.data(), 5, T, D, scaling);
  auto x = random_vector(B * T * H * D, 1), up = random_vector(B * T * H * D, 2);
  std::vector<double> out(x.size());
  auto loss = [&] {
    rope_forward(out.data(), x.data(), cos_t.data(), sin_t.data(), B, T, H, D);
    return dot(out, up);
  };
  loss();
  std::vector<double> dx(x.size());
  rope_backward(dx.data(), up.data(), cos_t.data(), sin_t.data(), B, T, H, D);
  expect_gradient("dinp", x, dx, loss);
}

TEST(GradCheck, T5RelativeBias) {
  const int64_t H = 3, Tq = 7, Tk = 9;
  const int32_t buckets = 8, max_distance = 16;
  for (bool bidirectional : {true, false}) {
    auto table = random_vector(buckets * H, 1), base = random_vector(H * Tq * Tk, 2), up = random_vector(H * Tq * Tk, 3);
    std::vector<double> scores(base.size());
    auto loss = [&] {
      scores = base;
      t5_bias_forward(scores.data(), table.data(), H, Tq, Tk, 2, bidirectional, buckets, max_distance);
      return dot(scores, up);
    };
    loss();
    std::vector<double> dtable(table.size());
    t5_bias_backward(dtable.data(), up.data(), H, Tq, Tk, 2, bidirectional, buckets, max_distance);
    expect_gradient(bidirectional ? "dtable (bidirectional)" : "dtable (causal)", table, dtable, loss);
  }
}

TEST(GradCheck, CosineSimilarity) {
  const int64_t N = 7, C = 13;
  auto a = random_vector(N * C, 1), b = random_vector(N * C, 2), up = random_vector(N, 3);
  std::vector<double> out(N);
  auto loss = [&] {
    cosine_similarity_forward(out.data(), a.data(), b.data(), N, C);
    return dot(out, up);
  };
  loss();
  std::vector<double> da(N * C), db(N * C);
  cosine_similarity_backward(da.data(), db.data(), up.data(), a.data(), b.data(), N, C);
  expect_gradient("da", a, da, loss);
  expect_gradient("db", b, db, loss);
}

TEST(GradCheck, EuclideanDistance) {
  const int64_t N = 7, C = 13;
  auto a = random_vector(N * C, 1), b = random_vector(N * C, 2), up = random_vector(N, 3);
  std::vector<double> out(N);
  auto loss = [&] {
    euclidean_distance_forward(out.data(), a.data(), b.data(), N, C);
    return dot(out, up);
  };
  loss();
  std::vector<double> da(N * C), db(N * C);
  euclidean_distance_backward(da.data(), db.data(), up.data(), a.data(), b.data(), N, C);
  expect_gradient("da", a, da, loss);
  expect_gradient("db", b, db, loss);
}

// Backward kernels add into their gradient buffers (the caller zeroes them): running one twice
// must double the gradient, never overwrite it.
TEST(GradCheck, BackwardAccumulates) {
  const int64_t N = 7, C = 13;
  auto x = random_vector(N * C, 1), w = random_vector(C, 2), b = random_vector(C, 3), up = random_vector(N * C, 4);
  std::vector<double> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
  std::vector<double> dx1(N * C), dw1(C), db1(C), dx2(N * C), dw2(C), db2(C);
  layernorm_backward(dx1.data(), dw1.data(), db1.data(), up.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  for (int i = 0; i < 2; ++i)
    layernorm_backward(dx2.data(), dw2.data(), db2.data(), up.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  for (double& v : dx1) v *= 2;
  for (double& v : dw1) v *= 2;
  testing::expect_all_close(dx2, dx1, 1e-12, "dinp after two backward calls");
  testing::expect_all_close(dw2, dw1, 1e-12, "dweight after two backward calls");
}

}  // namespace
}  // namespace attend::kernels
