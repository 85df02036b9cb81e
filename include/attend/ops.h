// Checked, Tensor-level forms of the kernels: each validates shapes and arguments and throws
// attend::Error naming both shapes on a mismatch, then calls the fp32 kernel. For users and learners
// who want one operation at a time; layers call the kernels directly.
#pragma once

#include <attend/activation.h>
#include <attend/tensor.h>

#include <cstdint>
#include <span>
#include <vector>

namespace attend::ops {

// a (M, K) · b (K, N) → (M, N)
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., C) · weightᵀ + bias, weight (OC, C), bias (OC) or nullptr → (..., OC)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias = nullptr);
// table (V, C) looked up at ids → (len(ids), C); every id must be in [0, V)
Tensor embedding(const Tensor& table, std::span<const int32_t> ids);

// Over the last dimension of x.
Tensor softmax(const Tensor& x, float temperature = 1.0f);
Tensor log_softmax(const Tensor& x);
Tensor logsumexp(const Tensor& x);  // (..., V) → (...)
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor* bias = nullptr, float eps = 1e-5f);
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps = 1e-6f);
Tensor activation(Activation kind, const Tensor& x);
Tensor swiglu(const Tensor& gate, const Tensor& up);

// Mean cross-entropy over the rows of logits (N, V) whose target is not ignore_index.
double cross_entropy(const Tensor& logits, std::span<const int32_t> targets, float label_smoothing = 0.0f,
                     int32_t ignore_index = -100);

// Row-wise over a, b (N, C) → (N).
Tensor cosine_similarity(const Tensor& a, const Tensor& b);
Tensor euclidean_distance(const Tensor& a, const Tensor& b);

struct TopK {
  std::vector<int32_t> indices;  // (M, k), best first
  Tensor scores;                 // (M, k)
};
// The k keys (N, C) with the largest inner product with each query (M, C).
TopK mips_topk(const Tensor& queries, const Tensor& keys, int64_t k);

// The sinusoidal position table (T, C) for positions 0 .. T−1.
Tensor sinusoidal_encoding(int64_t T, int64_t C, double base = 10000.0);

}  // namespace attend::ops
