// Every backward kernel *adds* into its gradient buffers (the caller zeroes them; accumulation over
// micro-batches, tied weights and residual branches relies on it). Each backward of src/kernels/*.h runs
// twice: into zeroed buffers, and into buffers pre-filled with known values; every buffer, biases and
// position tables included, must end as prefill + the gradient from zero.
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/position.h"
#include "kernels/similarity.h"
#include "kernels/softmax.h"
#include "testing.h"

#include <attend/runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace attend::kernels {
namespace {

using testing::random_vector;

// Gradient buffers of one backward call, by name.
template <typename T>
struct Grad {
  std::string name;
  std::vector<T>* buffer;
};

// In double, prefill + g is the one rounding of a single addition per element, or a few for kernels that add
// several terms in turn (fl(fl(P + a) + b) against P + fl(a + b)): 1e-12 relative separates that from a kernel
// that overwrites (off by the prefill, ≥ 1) or adds twice. fp32 kernels get fp32's few ulps.
template <typename T>
void expect_adds(const std::string& what, std::vector<Grad<T>> grads, const std::function<void()>& backward,
                 double tolerance = 1e-12) {
  for (Grad<T>& g : grads) std::fill(g.buffer->begin(), g.buffer->end(), T(0));
  backward();
  std::vector<std::vector<T>> from_zero, prefill;
  for (size_t i = 0; i < grads.size(); ++i) {
    from_zero.push_back(*grads[i].buffer);
    const bool moved = std::any_of(from_zero.back().begin(), from_zero.back().end(), [](T x) { return x != T(0); });
    EXPECT_TRUE(moved) << what << ": " << grads[i].name << " got no gradient, so the check says nothing";
    // Known values in [1, 2]: far from the gradients' scale, so an overwrite cannot pass as an addition.
    prefill.push_back(testing::cast<T>(random_vector(grads[i].buffer->size(), 1000 + i, 1.0, 2.0)));
    *grads[i].buffer = prefill.back();
  }
  backward();
  for (size_t i = 0; i < grads.size(); ++i) {
    std::vector<double> want(prefill[i].size());
    for (size_t j = 0; j < want.size(); ++j) want[j] = double(prefill[i][j]) + double(from_zero[i][j]);
    testing::expect_all_close(*grads[i].buffer, want, tolerance, what + ": " + grads[i].name + " = prefill + gradient");
  }
}

std::vector<double> values(size_t n, uint64_t seed) { return random_vector(n, seed); }

TEST(BackwardAccumulates, ElementWise) {
  const int64_t n = 37;
  auto inp = values(n, 1), dout = values(n, 2), up = values(n, 3);
  std::vector<double> dinp(n), dup(n), df(n);
  for (Activation a : {Activation::ReLU, Activation::GELU, Activation::GELUTanh, Activation::SiLU})
    expect_adds<double>(std::string("activation_backward ") + activation_name(a), {{"dinp", &dinp}},
                        [&] { activation_backward(a, dinp.data(), dout.data(), inp.data(), n); });
  for (Activation a : {Activation::SiLU, Activation::GELUTanh})
    expect_adds<double>(std::string("gated_backward ") + activation_name(a), {{"dgate", &dinp}, {"dup", &dup}},
                        [&] { gated_backward(a, dinp.data(), dup.data(), dout.data(), inp.data(), up.data(), n); });
  expect_adds<double>("dropout_backward", {{"dinp", &dinp}},
                      [&] { dropout_backward(dinp.data(), dout.data(), n, 0.3f, 7, 100); });
  expect_adds<double>("residual_backward", {{"dh", &dinp}, {"df", &df}},
                      [&] { residual_backward(dinp.data(), df.data(), dout.data(), n, 0.7); });
}

TEST(BackwardAccumulates, LossesAndSoftmaxes) {
  const int64_t N = 5, V = 11;
  auto logits = values(N * V, 4), dout = values(N * V, 5), drow = values(N, 6);
  std::vector<int32_t> targets = {3, -100, 0, 10, 7};
  std::vector<double> losses(N), lse(N), probs(N * V), logp(N * V), dinp(N * V);
  cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, 0.1, -100);
  expect_adds<double>("cross_entropy_backward", {{"dlogits", &dinp}}, [&] {
    cross_entropy_backward(dinp.data(), drow.data(), logits.data(), lse.data(), targets.data(), N, V, 0.1, -100);
  });
  softmax_forward(probs.data(), logits.data(), N, V, 1.5);
  expect_adds<double>("softmax_backward", {{"dinp", &dinp}},
                      [&] { softmax_backward(dinp.data(), dout.data(), probs.data(), N, V, 1.5); });
  log_softmax_forward(logp.data(), logits.data(), N, V);
  expect_adds<double>("log_softmax_backward", {{"dinp", &dinp}},
                      [&] { log_softmax_backward(dinp.data(), dout.data(), logp.data(), N, V); });
  logsumexp_forward(lse.data(), logits.data(), N, V);
  expect_adds<double>("logsumexp_backward", {{"dinp", &dinp}},
                      [&] { logsumexp_backward(dinp.data(), drow.data(), logits.data(), lse.data(), N, V); });
}

TEST(BackwardAccumulates, NormsAndProjections) {
  const int64_t N = 7, C = 13, OC = 9, V = 5;
  auto inp = values(N * C, 7), weight = values(C, 8), bias = values(C, 9), dout = values(N * C, 10);
  std::vector<double> out(N * C), mean(N), rstd(N), dinp(N * C), dweight(C), dbias(C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C, 1e-5);
  expect_adds<double>("layernorm_backward", {{"dinp", &dinp}, {"dweight", &dweight}, {"dbias", &dbias}}, [&] {
    layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), mean.data(),
                       rstd.data(), N, C);
  });
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, 1e-5);
  expect_adds<double>("rmsnorm_backward", {{"dinp", &dinp}, {"dweight", &dweight}}, [&] {
    rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(), N, C);
  });

  auto w = values(OC * C, 11), dy = values(N * OC, 12);
  std::vector<double> dw(OC * C), db(OC);
  expect_adds<double>("matmul_backward", {{"dinp", &dinp}, {"dweight", &dw}, {"dbias", &db}}, [&] {
    matmul_backward(dinp.data(), dw.data(), db.data(), dy.data(), inp.data(), w.data(), N, C, OC);
  });
  // Mixed precision: the same with 16-bit operands and fp32 sums (fp32's tolerance: sums of 13 products).
  for (Half type : {Half::BF16, Half::F16}) {
    const auto x = testing::cast<float>(inp), wf = testing::cast<float>(w), g = testing::cast<float>(dy);
    std::vector<uint16_t> x16(x.size()), w16(wf.size()), g16(g.size());
    round_to_half(type, x16.data(), x.data(), static_cast<int64_t>(x.size()));
    round_to_half(type, w16.data(), wf.data(), static_cast<int64_t>(wf.size()));
    round_to_half(type, g16.data(), g.data(), static_cast<int64_t>(g.size()));
    std::vector<float> dxf(N * C), dwf(OC * C), dbf(OC);
    expect_adds<float>(type == Half::BF16 ? "matmul_backward_half bf16" : "matmul_backward_half f16",
                       {{"dinp", &dxf}, {"dweight", &dwf}, {"dbias", &dbf}},
                       [&] {
                         matmul_backward_half(type, dxf.data(), dwf.data(), dbf.data(), g.data(), g16.data(),
                                              x16.data(), w16.data(), N, C, OC);
                       },
                       testing::kFloatTolerance);
  }

  const std::vector<int32_t> ids = {1, 4, 1, 0, 3, 1, 4};  // repeats: rows of the table add up
  std::vector<double> dtable(V * C);
  expect_adds<double>("embedding_backward", {{"dtable", &dtable}},
                      [&] { embedding_backward(dtable.data(), dout.data(), ids.data(), N, C); });
}

TEST(BackwardAccumulates, PositionsAndSimilarities) {
  const int64_t B = 2, T = 5, H = 3, D = 6, C = H * D;
  auto dout = values(B * T * C, 13);
  std::vector<double> dinp(B * T * C), dtable(T * C);
  expect_adds<double>("add_positions_backward", {{"dinp", &dinp}, {"dtable", &dtable}},
                      [&] { add_positions_backward(dinp.data(), dtable.data(), dout.data(), B, T, C); });
  std::vector<double> cos_table(T * D / 2), sin_table(T * D / 2);
  rope_tables(cos_table.data(), sin_table.data(), 0, T, D, RopeScaling{});
  expect_adds<double>("rope_backward", {{"dinp", &dinp}},
                      [&] { rope_backward(dinp.data(), dout.data(), cos_table.data(), sin_table.data(), B, T, H, D); });
  auto dscores = values(H * T * T, 14);
  std::vector<double> dt5(8 * H);
  expect_adds<double>("t5_bias_backward", {{"dtable", &dt5}},
                      [&] { t5_bias_backward(dt5.data(), dscores.data(), H, T, T, 0, true, 8, 16); });

  const int64_t N = 4;
  auto a = values(N * C, 15), b = values(N * C, 16), drow = values(N, 17);
  std::vector<double> da(N * C), db(N * C);
  expect_adds<double>("cosine_similarity_backward", {{"da", &da}, {"db", &db}},
                      [&] { cosine_similarity_backward(da.data(), db.data(), drow.data(), a.data(), b.data(), N, C); });
  expect_adds<double>("euclidean_distance_backward", {{"da", &da}, {"db", &db}},
                      [&] { euclidean_distance_backward(da.data(), db.data(), drow.data(), a.data(), b.data(), N, C); });
}

// The three attention kernels, with grouped-query heads, padding, dropout and a T5 bias table where the
// kernel takes them (linear attention takes none of them).
TEST(BackwardAccumulates, Attention) {
  const int64_t B = 2, Tq = 7, Tk = 9, H = 4, Hkv = 2, D = 6;
  std::vector<int32_t> lengths = {9, 6};
  auto t5 = values(8 * H, 18);
  AttentionParams<double> p{.B = B, .Tq = Tq, .Tk = Tk, .n_heads = H, .n_kv_heads = Hkv, .d_head = D, .scale = 0.4,
                            .key_lengths = lengths.data(), .t5_table = t5.data(), .t5_num_buckets = 8,
                            .t5_max_distance = 16, .dropout = 0.2f, .dropout_seed = 3, .dropout_offset = 11};
  auto q = values(B * Tq * H * D, 19), k = values(B * Tk * Hkv * D, 20), v = values(B * Tk * Hkv * D, 21);
  auto dout = values(B * Tq * H * D, 22);
  std::vector<double> out(B * Tq * H * D), probs(B * H * Tq * Tk), lse(B * H * Tq);
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), dt5(t5.size());
  const std::vector<Grad<double>> grads = {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}, {"dt5_table", &dt5}};
  attention_reference_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), p);
  expect_adds<double>("attention_reference_backward", grads, [&] {
    attention_reference_backward(dq.data(), dk.data(), dv.data(), dt5.data(), dout.data(), probs.data(), q.data(),
                                 k.data(), v.data(), p);
  });
  std::vector<double> workspace(flash_attention_workspace_size(p, num_threads()));
  flash_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), p, workspace.data());
  expect_adds<double>("flash_attention_backward", grads, [&] {
    flash_attention_backward(dq.data(), dk.data(), dv.data(), dt5.data(), dout.data(), out.data(), lse.data(), q.data(),
                             k.data(), v.data(), p, workspace.data());
  });

  AttentionParams<double> lin{.B = B, .Tq = Tq, .Tk = Tq, .n_heads = H, .n_kv_heads = Hkv, .d_head = D, .causal = true};
  auto kl = values(B * Tq * Hkv * D, 23), vl = values(B * Tq * Hkv * D, 24);
  std::vector<double> dkl(kl.size()), dvl(vl.size());
  std::vector<double> lin_workspace(linear_attention_workspace_size(lin, num_threads()));
  expect_adds<double>("linear_attention_backward", {{"dq", &dq}, {"dk", &dkl}, {"dv", &dvl}}, [&] {
    linear_attention_backward(dq.data(), dkl.data(), dvl.data(), dout.data(), q.data(), kl.data(), vl.data(), lin,
                              lin_workspace.data());
  });
}

}  // namespace
}  // namespace attend::kernels
