// The attention kernels: the reference against finite differences, the tiled (flash) and linear
// kernels against the reference, grouped-query heads against expanded multi-head attention.
#include "kernels/attention.h"
#include "kernels/position.h"
#include "testing.h"

#include <attend/runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace attend::kernels {
namespace {

using testing::cast;
using testing::dot;
using testing::expect_all_close;
using testing::expect_gradient;
using testing::random_vector;

// Inputs of one attention call: q, k, v, an upstream gradient, and (for T5) a bias table.
struct Problem {
  std::vector<double> q, k, v, up, table;
  std::vector<int32_t> lengths;
  std::vector<uint8_t> mask;
  std::vector<double> slopes;

  explicit Problem(const AttentionParams<double>& p, uint64_t seed = 1)
      : q(random_vector(p.B * p.Tq * p.n_heads * p.d_head, seed, -2, 2)),
        k(random_vector(p.B * p.Tk * p.n_kv_heads * p.d_head, seed + 1, -2, 2)),
        v(random_vector(p.B * p.Tk * p.n_kv_heads * p.d_head, seed + 2)),
        up(random_vector(p.B * p.Tq * p.n_heads * p.d_head, seed + 3)),
        table(random_vector(p.t5_num_buckets * p.n_heads, seed + 4)),
        slopes(p.n_heads) {
    alibi_slopes(slopes.data(), p.n_heads);
  }
};

template <typename T>
AttentionParams<T> params(int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D) {
  AttentionParams<T> p;
  p.B = B, p.Tq = Tq, p.Tk = Tk, p.n_heads = H, p.n_kv_heads = Hkv, p.d_head = D;
  p.scale = 1.0 / std::sqrt(static_cast<double>(D));
  return p;
}

template <typename To, typename From>
AttentionParams<To> convert(const AttentionParams<From>& p, const To* table) {
  AttentionParams<To> r;
  r.B = p.B, r.Tq = p.Tq, r.Tk = p.Tk, r.n_heads = p.n_heads, r.n_kv_heads = p.n_kv_heads, r.d_head = p.d_head;
  r.scale = p.scale, r.causal = p.causal, r.q_offset = p.q_offset, r.window = p.window;
  r.key_lengths = p.key_lengths, r.mask = p.mask;
  r.alibi_slopes = p.alibi_slopes, r.t5_table = p.t5_table != nullptr ? table : nullptr;
  r.t5_num_buckets = p.t5_num_buckets, r.t5_max_distance = p.t5_max_distance, r.t5_bidirectional = p.t5_bidirectional;
  r.dropout = p.dropout, r.dropout_seed = p.dropout_seed, r.dropout_offset = p.dropout_offset;
  return r;
}

// Runs the reference forward and backward; returns {out, dq, dk, dv, dtable}.
template <typename T>
std::array<std::vector<T>, 5> run_reference(const AttentionParams<T>& p, const std::vector<T>& q, const std::vector<T>& k,
                                            const std::vector<T>& v, const std::vector<T>& up) {
  std::vector<T> out(q.size()), probs(p.B * p.n_heads * p.Tq * p.Tk), dq(q.size()), dk(k.size()), dv(v.size()),
      dtable(p.t5_num_buckets * p.n_heads);
  attention_reference_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), p);
  attention_reference_backward(dq.data(), dk.data(), dv.data(), p.t5_table ? dtable.data() : nullptr, up.data(),
                               probs.data(), q.data(), k.data(), v.data(), p);
  return {out, dq, dk, dv, dtable};
}

template <typename T>
std::array<std::vector<T>, 5> run_flash(const AttentionParams<T>& p, const std::vector<T>& q, const std::vector<T>& k,
                                        const std::vector<T>& v, const std::vector<T>& up) {
  std::vector<T> out(q.size()), lse(p.B * p.n_heads * p.Tq), dq(q.size()), dk(k.size()), dv(v.size()),
      dtable(p.t5_num_buckets * p.n_heads), workspace(flash_attention_workspace_size(p, attend::num_threads()));
  flash_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), p, workspace.data());
  flash_attention_backward(dq.data(), dk.data(), dv.data(), p.t5_table ? dtable.data() : nullptr, up.data(), out.data(),
                           lse.data(), q.data(), k.data(), v.data(), p, workspace.data());
  return {out, dq, dk, dv, dtable};
}

// The reference's gradients against central differences of Σ up ⊙ attention(q, k, v).
void check_reference_gradients(AttentionParams<double> p, Problem& x, const std::string& what) {
  if (p.t5_table != nullptr) p.t5_table = x.table.data();
  if (p.alibi_slopes != nullptr) p.alibi_slopes = x.slopes.data();
  std::vector<double> out(x.q.size()), probs(p.B * p.n_heads * p.Tq * p.Tk);
  auto loss = [&] {
    attention_reference_forward(out.data(), probs.data(), x.q.data(), x.k.data(), x.v.data(), p);
    return dot(out, x.up);
  };
  auto [o, dq, dk, dv, dtable] = run_reference(p, x.q, x.k, x.v, x.up);
  for (double value : o) ASSERT_TRUE(std::isfinite(value)) << what;
  expect_gradient(what + " dq", x.q, dq, loss);
  expect_gradient(what + " dk", x.k, dk, loss);
  expect_gradient(what + " dv", x.v, dv, loss);
  if (p.t5_table != nullptr) expect_gradient(what + " dtable", x.table, dtable, loss);
}

TEST(AttentionReference, GradientsOfCrossAttentionWithPaddingAndGroupedHeads) {
  auto p = params<double>(2, 5, 7, 4, 2, 6);
  Problem x(p);
  x.lengths = {7, 4};
  p.key_lengths = x.lengths.data();
  check_reference_gradients(p, x, "cross+padding+GQA");
}

TEST(AttentionReference, GradientsOfCausalSelfAttentionWithAlibi) {
  auto p = params<double>(2, 7, 7, 3, 1, 5);
  p.causal = true;
  Problem x(p);
  p.alibi_slopes = x.slopes.data();
  check_reference_gradients(p, x, "causal+ALiBi+MQA");
}

TEST(AttentionReference, GradientsOfT5BiasBothDirections) {
  for (bool bidirectional : {true, false}) {
    auto p = params<double>(1, 6, 9, 2, 2, 4);
    p.t5_num_buckets = 8, p.t5_max_distance = 12, p.t5_bidirectional = bidirectional;
    p.causal = !bidirectional;
    p.q_offset = bidirectional ? 0 : 3;  // causal queries at positions 3..8 over 9 keys
    Problem x(p);
    p.t5_table = x.table.data();
    check_reference_gradients(p, x, bidirectional ? "T5 bidirectional" : "T5 causal");
  }
}

TEST(AttentionReference, GradientsWithDropoutAndAnArbitraryMask) {
  auto p = params<double>(1, 5, 6, 2, 2, 4);
  Problem x(p);
  x.mask.assign(p.B * p.Tq * p.Tk, 1);
  for (int64_t j = 0; j < p.Tk; ++j) x.mask[2 * p.Tk + j] = 0;  // query 2 sees nothing
  x.mask[0 * p.Tk + 3] = 0;
  x.mask[4 * p.Tk + 0] = 0;
  p.mask = x.mask.data();
  p.dropout = 0.3f, p.dropout_seed = 17;
  check_reference_gradients(p, x, "mask+dropout");
}

// A sliding window is the mask of its definition: query i (at position q_offset + i) sees keys j with
// q_offset + i − window < j ≤ q_offset + i. Both the window and the explicit mask run the same code after the
// mask, so the outputs and gradients agree exactly; the gradients also against finite differences.
TEST(AttentionReference, SlidingWindowIsTheMaskOfItsDefinition) {
  auto p = params<double>(2, 6, 11, 2, 1, 4);
  p.causal = true, p.q_offset = 5, p.window = 3;
  Problem x(p);
  check_reference_gradients(p, x, "window");
  auto masked = p;
  masked.window = 0;
  x.mask.assign(p.B * p.Tq * p.Tk, 0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.Tq; ++i)
      for (int64_t j = 0; j < p.Tk; ++j) {
        const int64_t pos = p.q_offset + i;
        x.mask[(b * p.Tq + i) * p.Tk + j] = j <= pos && j > pos - p.window;
      }
  masked.mask = x.mask.data();
  auto with_window = run_reference(p, x.q, x.k, x.v, x.up);
  auto with_mask = run_reference(masked, x.q, x.k, x.v, x.up);
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) expect_all_close(with_window[i], with_mask[i], 0.0, names[i]);
}

TEST(AttentionReference, FullyMaskedRowGivesZerosAndNoGradient) {
  auto p = params<double>(1, 3, 4, 1, 1, 2);
  Problem x(p);
  x.mask = {1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};  // query 1 sees no key
  p.mask = x.mask.data();
  auto [out, dq, dk, dv, dtable] = run_reference(p, x.q, x.k, x.v, x.up);
  EXPECT_EQ(out[2], 0.0);
  EXPECT_EQ(out[3], 0.0);
  EXPECT_EQ(dq[2], 0.0);
  EXPECT_EQ(dq[3], 0.0);
  for (double g : dq) EXPECT_TRUE(std::isfinite(g));
}

TEST(AttentionReference, WorkedExample_000_9_1) {
  auto p = params<double>(1, 2, 2, 1, 1, 3);  // scale 1/√3
  std::vector<double> q = {1, 0, 1, 0, 1, 1}, k = {1, 1, 0, 1, 0, 1}, v = {2, 0, 1, 1, 1, 0}, dO = {1, 0, 1, 0, 1, 0};
  auto [out, dq, dk, dv, dtable] = run_reference(p, q, k, v, dO);
  const double a0 = 1.0 / (1.0 + std::exp(1.0 / std::sqrt(3.0)));  // 0.3595 (see test_worked_examples.cpp)
  expect_all_close(out, std::vector<double>{1 + a0, 1 - a0, a0, 1.5, 0.5, 0.5}, 1e-15, "O");
  expect_all_close(dv, std::vector<double>{a0, 0.5, a0, 1 - a0, 0.5, 1 - a0}, 1e-15, "dL/dV (000 §9.2)");
}

// Grouped-query attention is multi-head attention whose key/value heads are shared: expanding k and v
// to one head per query head must give the same output, and the grouped dK is the sum over the group.
TEST(AttentionReference, GroupedQueryEqualsExpandedMultiHead) {
  const int64_t B = 2, T = 6, H = 6, Hkv = 2, D = 4, G = H / Hkv;
  auto gqa = params<double>(B, T, T, H, Hkv, D);
  gqa.causal = true;
  auto mha = gqa;
  mha.n_kv_heads = H;
  Problem x(gqa);
  std::vector<double> k_full(B * T * H * D), v_full(B * T * H * D);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        k_full[(bt * H + h) * D + d] = x.k[(bt * Hkv + h / G) * D + d];
        v_full[(bt * H + h) * D + d] = x.v[(bt * Hkv + h / G) * D + d];
      }
  auto [o1, dq1, dk1, dv1, t1] = run_reference(gqa, x.q, x.k, x.v, x.up);
  auto [o2, dq2, dk2, dv2, t2] = run_reference(mha, x.q, k_full, v_full, x.up);
  expect_all_close(o1, o2, 1e-14, "output");
  expect_all_close(dq1, dq2, 1e-14, "dq");
  std::vector<double> dk_summed(x.k.size()), dv_summed(x.v.size());
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        dk_summed[(bt * Hkv + h / G) * D + d] += dk2[(bt * H + h) * D + d];
        dv_summed[(bt * Hkv + h / G) * D + d] += dv2[(bt * H + h) * D + d];
      }
  expect_all_close(dk1, dk_summed, 1e-14, "dk");
  expect_all_close(dv1, dv_summed, 1e-14, "dv");
}

// ---- Tiled ----------------------------------------------------------------------------------------

// The tiled kernel in double is the same mathematics as the reference, up to summation order.
TEST(FlashAttention, DoubleEqualsReferenceExactly) {
  auto p = params<double>(2, 150, 300, 4, 2, 8);  // several tiles in both directions, ragged edges
  p.causal = true, p.q_offset = 150;
  Problem x(p);
  x.lengths = {300, 211};
  p.key_lengths = x.lengths.data();
  p.t5_table = x.table.data();
  auto ref = run_reference(p, x.q, x.k, x.v, x.up);
  auto fla = run_flash(p, x.q, x.k, x.v, x.up);
  const char* names[] = {"out", "dq", "dk", "dv", "dtable"};
  for (int i = 0; i < 5; ++i) expect_all_close(fla[i], ref[i], 1e-12, names[i]);
}

// Windows narrower than a tile, straddling tiles and wider than the context; with a cache offset and padding.
TEST(FlashAttention, SlidingWindowEqualsReference) {
  for (const int64_t window : {1, 5, 40, 97, 1000}) {
    auto p = params<double>(2, 150, 230, 4, 2, 8);
    p.causal = true, p.q_offset = 80, p.window = window;
    Problem x(p);
    x.lengths = {230, 190};
    p.key_lengths = x.lengths.data();
    auto ref = run_reference(p, x.q, x.k, x.v, x.up);
    auto fla = run_flash(p, x.q, x.k, x.v, x.up);
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i) expect_all_close(fla[i], ref[i], 1e-12, fmt::format("window {} {}", window, names[i]));
  }
}

enum class Scheme { None, RoPE, ALiBi, T5 };

struct FlashCase {
  int64_t T;
  bool causal;
  bool padding;
  Scheme scheme;
};

class FlashVsReference : public ::testing::TestWithParam<FlashCase> {};

// fp32: the tiled kernel equals the reference to 1e-5 (relative to max(1, |value|)) in the output,
// and to 1e-4 in the gradients, whose sums run over up to a thousand terms.
TEST_P(FlashVsReference, Float32) {
  const auto c = GetParam();
  auto pd = params<double>(2, c.T, c.T, 4, 2, 16);
  pd.causal = c.causal;
  Problem x(pd, 7);
  if (c.padding) {
    x.lengths = {static_cast<int32_t>(c.T), static_cast<int32_t>(std::max<int64_t>(1, c.T * 2 / 3))};
    pd.key_lengths = x.lengths.data();
  }
  if (c.scheme == Scheme::ALiBi) pd.alibi_slopes = x.slopes.data();
  if (c.scheme == Scheme::T5) pd.t5_table = x.table.data();
  auto q = cast<float>(x.q), k = cast<float>(x.k), v = cast<float>(x.v), up = cast<float>(x.up);
  auto table = cast<float>(x.table);
  if (c.scheme == Scheme::RoPE) {  // RoPE rotates q and k before attention; both kernels see the same inputs
    std::vector<float> cos_t(c.T * 8), sin_t(c.T * 8);
    rope_tables(cos_t.data(), sin_t.data(), 0, c.T, 16, RopeScaling{});
    rope_forward(q.data(), q.data(), cos_t.data(), sin_t.data(), 2, c.T, 4, 16);
    rope_forward(k.data(), k.data(), cos_t.data(), sin_t.data(), 2, c.T, 2, 16);
  }
  auto p = convert<float>(pd, table.data());
  auto ref = run_reference(p, q, k, v, up);
  auto fla = run_flash(p, q, k, v, up);
  expect_all_close(fla[0], ref[0], 1e-5, "out");
  expect_all_close(fla[1], ref[1], 1e-4, "dq");
  expect_all_close(fla[2], ref[2], 1e-4, "dk");
  expect_all_close(fla[3], ref[3], 1e-4, "dv");
  if (c.scheme == Scheme::T5) expect_all_close(fla[4], ref[4], 1e-4, "dtable");
}

std::vector<FlashCase> flash_cases() {
  std::vector<FlashCase> cases;
  for (int64_t T : {1, 7, 64, 129, 1000})
    for (bool causal : {false, true}) cases.push_back({T, causal, T > 1, Scheme::None});
  for (Scheme s : {Scheme::RoPE, Scheme::ALiBi, Scheme::T5})
    for (bool causal : {false, true}) cases.push_back({129, causal, true, s});
  return cases;
}

std::string flash_case_name(const ::testing::TestParamInfo<FlashCase>& info) {
  static const char* const kSchemes[] = {"none", "rope", "alibi", "t5"};
  return fmt::format("T{}_{}_{}{}", info.param.T, info.param.causal ? "causal" : "full",
                     kSchemes[static_cast<int>(info.param.scheme)], info.param.padding ? "_padded" : "");
}

INSTANTIATE_TEST_SUITE_P(Sizes, FlashVsReference, ::testing::ValuesIn(flash_cases()), flash_case_name);

TEST(FlashAttention, DropoutMatchesReferenceMask) {
  auto p = params<double>(1, 70, 200, 2, 1, 8);
  p.dropout = 0.25f, p.dropout_seed = 5, p.dropout_offset = 1000;
  Problem x(p);
  auto ref = run_reference(p, x.q, x.k, x.v, x.up);
  auto fla = run_flash(p, x.q, x.k, x.v, x.up);
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) expect_all_close(fla[i], ref[i], 1e-12, names[i]);
}

TEST(FlashAttention, FullyMaskedRowsGiveZerosNotNaN) {
  auto p = params<float>(1, 3, 200, 1, 1, 4);
  std::vector<uint8_t> mask(3 * 200, 1);
  for (int j = 0; j < 200; ++j) mask[200 + j] = 0;
  p.mask = mask.data();
  auto q = cast<float>(random_vector(3 * 4, 1)), k = cast<float>(random_vector(200 * 4, 2)),
       v = cast<float>(random_vector(200 * 4, 3)), up = cast<float>(random_vector(3 * 4, 4));
  auto r = run_flash(p, q, k, v, up);
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(r[0][4 + d], 0.0f);
    EXPECT_EQ(r[1][4 + d], 0.0f);
  }
  for (const auto& a : r)
    for (float value : a) ASSERT_TRUE(std::isfinite(value));
}

// ---- Linear ---------------------------------------------------------------------------------------

// φ(x) = elu(x) + 1 attention written directly from its definition, O(T²): out_i = Σ_j w_ij v_j / Σ_j w_ij
// with w_ij = φ(q_i)·φ(k_j) over the visible keys.
std::vector<double> linear_attention_by_definition(const AttentionParams<double>& p, const Problem& x) {
  auto phi = [](double t) { return t > 0 ? t + 1 : std::exp(t); };
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = p.d_head, T = p.Tq;
  std::vector<double> out(x.q.size());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double total = 0;
        std::vector<double> acc(D);
        for (int64_t j = 0; j < (p.causal ? i + 1 : T); ++j) {
          double w = 0;
          for (int64_t d = 0; d < D; ++d)
            w += phi(x.q[((b * T + i) * H + h) * D + d]) * phi(x.k[((b * T + j) * Hkv + h / p.group_size()) * D + d]);
          total += w;
          for (int64_t d = 0; d < D; ++d) acc[d] += w * x.v[((b * T + j) * Hkv + h / p.group_size()) * D + d];
        }
        for (int64_t d = 0; d < D; ++d) out[((b * T + i) * H + h) * D + d] = acc[d] / total;
      }
  return out;
}

TEST(LinearAttention, MatchesDefinitionAndFiniteDifferences) {
  for (bool causal : {false, true}) {
    auto p = params<double>(2, 7, 7, 4, 2, 5);
    p.causal = causal;
    Problem x(p);
    std::vector<double> out(x.q.size()), workspace(linear_attention_workspace_size(p, attend::num_threads()));
    auto loss = [&] {
      linear_attention_forward(out.data(), x.q.data(), x.k.data(), x.v.data(), p, workspace.data());
      return dot(out, x.up);
    };
    loss();
    expect_all_close(out, linear_attention_by_definition(p, x), 1e-12, causal ? "causal" : "full");
    std::vector<double> dq(x.q.size()), dk(x.k.size()), dv(x.v.size());
    linear_attention_backward(dq.data(), dk.data(), dv.data(), x.up.data(), x.q.data(), x.k.data(), x.v.data(), p,
                              workspace.data());
    const std::string what = causal ? "causal " : "full ";
    expect_gradient(what + "dq", x.q, dq, loss);
    expect_gradient(what + "dk", x.k, dk, loss);
    expect_gradient(what + "dv", x.v, dv, loss);
  }
}

}  // namespace
}  // namespace attend::kernels
