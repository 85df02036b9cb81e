// The notes' worked examples, with the numbers worked out by hand. Where the notes round, the tests
// use the exact value and say so; where a note is wrong, the comment says where.
#include "kernels/gemm.h"
#include "kernels/position.h"
#include "kernels/similarity.h"
#include "kernels/softmax.h"
#include "testing.h"
#include "train/clip.h"

#include <cmath>

namespace attend {
namespace {

using namespace attend::kernels;

// 000 §9.1 / 003 §14.1: Q, K, V of two tokens, d_k = d_v = 3, one head.
struct TinyAttention {
  std::vector<double> Q = {1, 0, 1, 0, 1, 1};
  std::vector<double> K = {1, 1, 0, 1, 0, 1};
  std::vector<double> V = {2, 0, 1, 1, 1, 0};
  std::vector<double> S = std::vector<double>(4), A = std::vector<double>(4), O = std::vector<double>(6);

  TinyAttention() {
    gemm<double>(false, true, 2, 2, 3, 1.0 / std::sqrt(3.0), Q.data(), 3, K.data(), 3, 0.0, S.data(), 2);  // QKᵀ/√3
    softmax_forward(A.data(), S.data(), 2, 2, 1.0);
    gemm<double>(false, false, 2, 3, 2, 1.0, A.data(), 2, V.data(), 3, 0.0, O.data(), 3);  // O = AV
  }
};

TEST(WorkedExample, TinyAttentionForward_000_9_1) {
  TinyAttention t;
  // Step 1-2: QKᵀ = [[1, 2], [1, 1]], scaled by 1/√3 ≈ 0.577.
  EXPECT_NEAR(t.S[0], 0.577, 5e-4);
  EXPECT_NEAR(t.S[1], 1.155, 5e-4);
  EXPECT_NEAR(t.S[2], 0.577, 5e-4);
  EXPECT_NEAR(t.S[3], 0.577, 5e-4);
  // Step 3: exactly, row 1 is 1/(1 + e^{1/√3}) = 0.359543, 0.640457; row 2 is [0.5, 0.5].
  // 000 §9.1 prints 0.359 / 0.641: it truncates 0.3595 (correctly rounded it is 0.360 / 0.640), so the
  // notes' three decimals are checked to within 1e-3. 003 §14.1 prints A ≈ [[0.38, 0.62], [0.5, 0.5]]
  // and O ≈ [[1.38, 0.62, 0.38], ...]: a slip in the second decimal. The exact values are the ones here.
  constexpr double kNotesRounding = 1e-3;
  const double a0 = 1.0 / (1.0 + std::exp(1.0 / std::sqrt(3.0)));
  EXPECT_NEAR(t.A[0], a0, 1e-15);
  EXPECT_NEAR(t.A[0], 0.359, kNotesRounding);
  EXPECT_NEAR(t.A[1], 0.641, kNotesRounding);
  EXPECT_DOUBLE_EQ(t.A[2], 0.5);
  EXPECT_DOUBLE_EQ(t.A[3], 0.5);
  // Step 4: O = AV = [[1.359, 0.641, 0.359], [1.5, 0.5, 0.5]].
  const std::vector<double> expected = {1 + a0, 1 - a0, a0, 1.5, 0.5, 0.5};
  testing::expect_all_close(t.O, expected, 1e-15, "O");
  EXPECT_NEAR(t.O[0], 1.359, kNotesRounding);
  EXPECT_NEAR(t.O[1], 0.641, kNotesRounding);
  EXPECT_NEAR(t.O[2], 0.359, kNotesRounding);
}

TEST(WorkedExample, TinyAttentionBackwardValues_000_9_2) {
  TinyAttention t;
  // dL/dO = [[1, 0, 1], [0, 1, 0]];  dL/dV = Aᵀ · dL/dO = [[0.359, 0.5, 0.359], [0.641, 0.5, 0.641]].
  std::vector<double> dO = {1, 0, 1, 0, 1, 0}, dV(6);
  gemm<double>(true, false, 2, 3, 2, 1.0, t.A.data(), 2, dO.data(), 3, 0.0, dV.data(), 3);
  const double a0 = t.A[0];
  testing::expect_all_close(dV, std::vector<double>{a0, 0.5, a0, 1 - a0, 0.5, 1 - a0}, 1e-15, "dV");
  EXPECT_NEAR(dV[0], 0.359, 1e-3);  // the notes' truncated 0.3595, as in §9.1
  EXPECT_NEAR(dV[3], 0.641, 1e-3);
  // And dL/dV agrees with finite differences of L = Σ dO ⊙ (A V).
  auto loss = [&] {
    TinyAttention u;  // A does not depend on V
    gemm<double>(false, false, 2, 3, 2, 1.0, u.A.data(), 2, t.V.data(), 3, 0.0, u.O.data(), 3);
    return testing::dot(u.O, dO);
  };
  testing::expect_gradient("dV", t.V, dV, loss);
}

TEST(WorkedExample, SoftmaxJacobianRowsSumToZero_002_1_4) {
  std::vector<double> z = {0.3, -1.2, 2.0, 0.7, 0.0}, p(5), J(25);
  softmax_forward(p.data(), z.data(), 1, 5, 1.0);
  softmax_jacobian(J.data(), p.data(), 5);
  for (int i = 0; i < 5; ++i) {
    double row = 0;
    for (int j = 0; j < 5; ++j) row += J[i * 5 + j];
    EXPECT_NEAR(row, 0.0, 1e-15) << "row " << i;
    EXPECT_NEAR(J[i * 5 + i], p[i] * (1 - p[i]), 1e-16);  // diagonal p_i(1 − p_i)
  }
  // The Jacobian is symmetric, so Jᵀ·dp (what backward computes) equals J·dp.
  std::vector<double> dp = {1, -2, 0.5, 3, -1}, dz(5);
  softmax_backward(dz.data(), dp.data(), p.data(), 1, 5, 1.0);
  for (int j = 0; j < 5; ++j) {
    double jd = 0;
    for (int i = 0; i < 5; ++i) jd += J[i * 5 + j] * dp[i];
    EXPECT_NEAR(dz[j], jd, 1e-15);
  }
}

TEST(WorkedExample, GlobalNormClippingFrom50To5ScalesByOneTenth_004_9_4) {
  // Gradients whose global norm is √(30² + 40²) = 50, clipped to 5: every gradient × 0.1. Two parameters'
  // gradients, a (2) and b (1), side by side as in a model's gradient buffer.
  std::vector<float> buffer = {30, 0, 40};
  const std::span<float> grads(buffer), a = grads.first(2), b = grads.subspan(2);
  EXPECT_DOUBLE_EQ(train::global_grad_norm(grads), 50.0);
  EXPECT_DOUBLE_EQ(train::clip_grad_norm(grads, 5.0), 50.0);
  EXPECT_FLOAT_EQ(a[0], 3.0f);
  EXPECT_FLOAT_EQ(a[1], 0.0f);
  EXPECT_FLOAT_EQ(b[0], 4.0f);
  EXPECT_NEAR(train::global_grad_norm(grads), 5.0, 1e-6);
  // Below the threshold nothing changes.
  EXPECT_NEAR(train::clip_grad_norm(grads, 10.0), 5.0, 1e-6);
  EXPECT_FLOAT_EQ(b[0], 4.0f);
}

TEST(WorkedExample, ClippingOneGradientBufferAgreesWithClippingByParameter_004_9_4) {
  // The same 50 → 5 on one array (a model's gradient buffer): gaps of zeros between the gradients.
  std::vector<float> grads = {30, 0, 0, 0, 40, 0};
  EXPECT_DOUBLE_EQ(train::global_grad_norm(std::span<const float>(grads)), 50.0);
  EXPECT_DOUBLE_EQ(train::clip_grad_norm(std::span<float>(grads), 5.0), 50.0);
  EXPECT_EQ(grads, (std::vector<float>{3, 0, 0, 0, 4, 0}));
  EXPECT_NEAR(train::clip_grad_norm(std::span<float>(grads), 10.0), 5.0, 1e-6);
  EXPECT_FLOAT_EQ(grads[4], 4.0f);
  train::scale_grads(std::span<float>(grads), 0.5);
  EXPECT_EQ(grads, (std::vector<float>{1.5, 0, 0, 0, 2, 0}));
}

TEST(WorkedExample, LogSumExpOf1000And1001DoesNotOverflow_004_9_5) {
  // log(e^1000 + e^1001) = 1001 + log(1 + e^−1) = 1001.31326...; e^1000 alone overflows even a double.
  ASSERT_TRUE(std::isinf(std::exp(1000.0)));
  const double exact = 1001.0 + std::log1p(std::exp(-1.0));
  std::vector<double> z = {1000.0, 1001.0};
  double lse = 0;
  logsumexp_forward(&lse, z.data(), 1, 2);
  EXPECT_NEAR(lse, exact, 1e-12);
  std::vector<float> zf = {1000.0f, 1001.0f};
  float lsef = 0;
  logsumexp_forward(&lsef, zf.data(), 1, 2);
  EXPECT_NEAR(lsef, exact, 1e-4);
  EXPECT_NEAR(lsef, 1001.3133f, 1e-4);
}

TEST(WorkedExample, CatAndDogSimilarity_000_4_2) {
  std::vector<double> cat = {0.8, 0.2, 0.1}, dog = {0.7, 0.3, 0.2};
  double cosine = 0, distance = 0;
  cosine_similarity_forward(&cosine, cat.data(), dog.data(), 1, 3);
  euclidean_distance_forward(&distance, cat.data(), dog.data(), 1, 3);
  // 0.64/(√0.69·√0.62) = 0.97854... 000 §4.2.1 rounds the norms to 0.83 and 0.79 first and prints
  // "≈ 0.97": a slip in the second decimal (the exact value rounds to 0.98).
  EXPECT_NEAR(cosine, 0.64 / std::sqrt(0.69 * 0.62), 1e-15);
  EXPECT_NEAR(cosine, 0.9785, 1e-4);
  EXPECT_NEAR(distance, std::sqrt(0.03), 1e-15);  // ≈ 0.17, as the notes say
}

TEST(WorkedExample, SinusoidalShiftIsALinearMap_000_6_2) {
  // For each pair (sin pω, cos pω), a shift by k is the rotation [[cos kω, sin kω], [−sin kω, cos kω]]:
  // one fixed matrix M_k maps PE(pos) to PE(pos + k) for every pos.
  const int64_t C = 16, k = 5;
  std::vector<double> pe(64 * C);
  sinusoidal_table(pe.data(), 0, 64, C, 10000.0);
  for (int64_t pos : {0, 3, 17, 40}) {
    for (int64_t i = 0; i < C / 2; ++i) {
      const double w = std::pow(10000.0, -2.0 * i / C);
      const double s = pe[pos * C + 2 * i], c = pe[pos * C + 2 * i + 1];
      EXPECT_NEAR(pe[(pos + k) * C + 2 * i], std::cos(k * w) * s + std::sin(k * w) * c, 1e-12);
      EXPECT_NEAR(pe[(pos + k) * C + 2 * i + 1], -std::sin(k * w) * s + std::cos(k * w) * c, 1e-12);
    }
  }
  // And PE(i)·PE(j) depends only on i − j.
  auto dot_at = [&](int64_t i, int64_t j) {
    double d = 0;
    for (int64_t c = 0; c < C; ++c) d += pe[i * C + c] * pe[j * C + c];
    return d;
  };
  EXPECT_NEAR(dot_at(10, 3), dot_at(50, 43), 1e-12);
}

TEST(WorkedExample, RopeScoreDependsOnlyOnRelativePosition_000_6_2) {
  const int64_t D = 16, T = 120;
  std::vector<double> cos_t(T * D / 2), sin_t(T * D / 2);
  rope_tables(cos_t.data(), sin_t.data(), 0, T, D, RopeScaling{});
  auto q = testing::random_vector(D, 1), k = testing::random_vector(D, 2);
  // Rotate q as if at position m and k as if at position n (one row of the tables each).
  auto rotated = [&](const std::vector<double>& x, int64_t pos) {
    std::vector<double> y(D);
    rope_forward(y.data(), x.data(), cos_t.data() + pos * D / 2, sin_t.data() + pos * D / 2, 1, 1, 1, D);
    return y;
  };
  auto score = [&](int64_t m, int64_t n) { return testing::dot(rotated(q, m), rotated(k, n)); };
  EXPECT_NEAR(score(5, 2), score(10, 7), 1e-12);
  EXPECT_NEAR(score(5, 2), score(103, 100), 1e-12);
  EXPECT_NEAR(score(2, 5), score(100, 103), 1e-12);
  EXPECT_GT(std::abs(score(5, 2) - score(5, 4)), 1e-6);  // a different offset gives a different score
  // Rotations preserve length.
  EXPECT_NEAR(testing::dot(rotated(q, 77), rotated(q, 77)), testing::dot(q, q), 1e-12);
}

}  // namespace
}  // namespace attend
