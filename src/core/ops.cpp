#include <attend/error.h>
#include <attend/ops.h>

#include "kernels/activation.h"
#include "kernels/cross_entropy.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/position.h"
#include "kernels/similarity.h"
#include "kernels/softmax.h"

#include <cmath>
#include <vector>

namespace attend {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
    case Activation::SiLU: return "silu";
  }
  return "?";
}

Activation parse_activation(std::string_view name) {
  if (name == "relu") return Activation::ReLU;
  if (name == "gelu") return Activation::GELU;
  if (name == "gelu_tanh" || name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::GELUTanh;
  if (name == "silu" || name == "swish") return Activation::SiLU;
  throw Error(fmt::format("unknown activation '{}': expected relu, gelu, gelu_tanh (gelu_new) or silu (swish)", name));
}

}  // namespace attend

namespace attend::ops {
namespace {

// The shape with its last dimension replaced.
Shape with_last(const Shape& shape, int64_t last) {
  std::vector<int64_t> dims(shape.begin(), shape.end());
  dims.back() = last;
  return Shape(dims);
}

// The shape without its last dimension.
Shape without_last(const Shape& shape) { return Shape(std::span<const int64_t>(shape.begin(), shape.end() - 1)); }

void check_rank_at_least(const Tensor& t, int rank, const char* op, const char* name) {
  check(t.rank() >= rank, "{}: {} must have at least {} dimension(s), got shape {}", op, name, rank, t.shape());
}

int64_t rows(const Tensor& t) { return t.numel() / t.shape()[-1]; }

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check(a.rank() == 2 && b.rank() == 2, "matmul: expected two matrices, got shapes {} and {}", a.shape(), b.shape());
  check(a.size(1) == b.size(0), "matmul: shapes {} and {} cannot be multiplied: inner dimensions {} and {} differ",
        a.shape(), b.shape(), a.size(1), b.size(0));
  Tensor out({a.size(0), b.size(1)});
  kernels::gemm<float>(false, false, a.size(0), b.size(1), a.size(1), 1.0f, a.data(), a.size(1), b.data(),
                       b.size(1), 0.0f, out.data(), b.size(1));
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias) {
  check_rank_at_least(x, 1, "linear", "input");
  const int64_t C = x.shape()[-1];
  check(weight.rank() == 2 && weight.size(1) == C,
        "linear: input has shape {} and weight has shape {}: expected weight [out_features, {}]", x.shape(),
        weight.shape(), C);
  const int64_t OC = weight.size(0);
  if (bias != nullptr)
    check(bias->shape() == Shape{OC}, "linear: weight has shape {} and bias has shape {}: expected bias [{}]",
          weight.shape(), bias->shape(), OC);
  Tensor out(with_last(x.shape(), OC));
  kernels::matmul_forward(out.data(), x.data(), weight.data(), bias != nullptr ? bias->data() : nullptr, rows(x), C,
                          OC);
  return out;
}

Tensor embedding(const Tensor& table, std::span<const int32_t> ids) {
  check(table.rank() == 2, "embedding: table must be (vocabulary, channels), got shape {}", table.shape());
  const int64_t V = table.size(0), C = table.size(1);
  for (size_t i = 0; i < ids.size(); ++i)
    check(ids[i] >= 0 && ids[i] < V, "embedding: token id {} at position {} is outside the vocabulary [0, {})", ids[i],
          i, V);
  const auto N = static_cast<int64_t>(ids.size());
  Tensor out({N, C});
  kernels::embedding_forward(out.data(), ids.data(), table.data(), N, C);
  return out;
}

Tensor softmax(const Tensor& x, float temperature) {
  check_rank_at_least(x, 1, "softmax", "input");
  check(temperature > 0.0f && std::isfinite(temperature), "softmax: temperature must be positive, got {}", temperature);
  Tensor out(x.shape());
  kernels::softmax_forward(out.data(), x.data(), rows(x), x.shape()[-1], temperature);
  return out;
}

Tensor log_softmax(const Tensor& x) {
  check_rank_at_least(x, 1, "log_softmax", "input");
  Tensor out(x.shape());
  kernels::log_softmax_forward(out.data(), x.data(), rows(x), x.shape()[-1]);
  return out;
}

Tensor logsumexp(const Tensor& x) {
  check_rank_at_least(x, 1, "logsumexp", "input");
  Tensor out(without_last(x.shape()));
  kernels::logsumexp_forward(out.data(), x.data(), rows(x), x.shape()[-1]);
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor* bias, float eps) {
  check_rank_at_least(x, 1, "layer_norm", "input");
  const int64_t C = x.shape()[-1];
  check(weight.shape() == Shape{C}, "layer_norm: input has shape {} and weight has shape {}: expected weight [{}]",
        x.shape(), weight.shape(), C);
  if (bias != nullptr)
    check(bias->shape() == Shape{C}, "layer_norm: input has shape {} and bias has shape {}: expected bias [{}]",
          x.shape(), bias->shape(), C);
  Tensor out(x.shape());
  std::vector<float> mean(rows(x)), rstd(rows(x));
  kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                             bias != nullptr ? bias->data() : nullptr, rows(x), C, eps);
  return out;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  check_rank_at_least(x, 1, "rms_norm", "input");
  const int64_t C = x.shape()[-1];
  check(weight.shape() == Shape{C}, "rms_norm: input has shape {} and weight has shape {}: expected weight [{}]",
        x.shape(), weight.shape(), C);
  Tensor out(x.shape());
  std::vector<float> rstd(rows(x));
  kernels::rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), rows(x), C, eps);
  return out;
}

Tensor activation(Activation kind, const Tensor& x) {
  Tensor out(x.shape());
  kernels::activation_forward(kind, out.data(), x.data(), x.numel());
  return out;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_same_shape(gate.shape(), up.shape(), "swiglu: gate and up");
  Tensor out(gate.shape());
  kernels::swiglu_forward(out.data(), gate.data(), up.data(), gate.numel());
  return out;
}

double cross_entropy(const Tensor& logits, std::span<const int32_t> targets, float label_smoothing,
                     int32_t ignore_index) {
  check(logits.rank() == 2, "cross_entropy: logits must be (rows, vocabulary), got shape {}", logits.shape());
  const int64_t N = logits.size(0), V = logits.size(1);
  check(static_cast<int64_t>(targets.size()) == N, "cross_entropy: logits have shape {} but there are {} targets",
        logits.shape(), targets.size());
  check(label_smoothing >= 0.0f && label_smoothing <= 1.0f, "cross_entropy: label_smoothing must be in [0, 1], got {}",
        label_smoothing);
  for (size_t i = 0; i < targets.size(); ++i)
    check(targets[i] == ignore_index || (targets[i] >= 0 && targets[i] < V),
          "cross_entropy: target {} at row {} is outside the vocabulary [0, {})", targets[i], i, V);
  std::vector<float> losses(N), lse(N);
  int64_t counted = kernels::cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V,
                                                   label_smoothing, ignore_index);
  if (counted == 0) return 0.0;
  double sum = 0.0;
  for (float l : losses) sum += l;
  return sum / static_cast<double>(counted);
}

Tensor cosine_similarity(const Tensor& a, const Tensor& b) {
  check(a.rank() == 2, "cosine_similarity: expected (rows, channels), got shape {}", a.shape());
  check_same_shape(a.shape(), b.shape(), "cosine_similarity: a and b");
  Tensor out({a.size(0)});
  kernels::cosine_similarity_forward(out.data(), a.data(), b.data(), a.size(0), a.size(1));
  return out;
}

Tensor euclidean_distance(const Tensor& a, const Tensor& b) {
  check(a.rank() == 2, "euclidean_distance: expected (rows, channels), got shape {}", a.shape());
  check_same_shape(a.shape(), b.shape(), "euclidean_distance: a and b");
  Tensor out({a.size(0)});
  kernels::euclidean_distance_forward(out.data(), a.data(), b.data(), a.size(0), a.size(1));
  return out;
}

TopK mips_topk(const Tensor& queries, const Tensor& keys, int64_t k) {
  check(queries.rank() == 2 && keys.rank() == 2 && queries.size(1) == keys.size(1),
        "mips_topk: queries have shape {} and keys have shape {}: expected (M, C) and (N, C)", queries.shape(),
        keys.shape());
  const int64_t M = queries.size(0), N = keys.size(0), C = keys.size(1);
  check(k >= 1 && k <= N, "mips_topk: k must be in [1, {}] (the number of keys), got {}", N, k);
  TopK result{std::vector<int32_t>(M * k), Tensor({M, k})};
  Tensor scratch({M, N});
  kernels::mips_topk(result.indices.data(), result.scores.data(), scratch.data(), queries.data(), keys.data(), M, N,
                     C, k);
  return result;
}

Tensor sinusoidal_encoding(int64_t T, int64_t C, double base) {
  check(T >= 0 && C >= 1, "sinusoidal_encoding: need T >= 0 and C >= 1, got T={} C={}", T, C);
  Tensor out({T, C});
  kernels::sinusoidal_table(out.data(), 0, T, C, base);
  return out;
}

}  // namespace attend::ops
