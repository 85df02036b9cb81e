// Similarity of vectors: cosine similarity, Euclidean distance and exact maximum-inner-product
// search (000 §4). Attention's scores are inner products: MIPS is what one attention row computes.
#pragma once

#include <cstdint>

namespace attend::kernels {

// out[n] = a[n]·b[n] / max(‖a[n]‖·‖b[n]‖, eps)
template <typename T>
void cosine_similarity_forward(T* out,      // (N)
                               const T* a,  // (N, C)
                               const T* b,  // (N, C)
                               int64_t N, int64_t C, T eps = T(1e-8));

// With s = a·b/(‖a‖‖b‖):  ∂s/∂a = b/(‖a‖‖b‖) − s·a/‖a‖²,  and symmetrically for b.
template <typename T>
void cosine_similarity_backward(T* da, T* db,    // (N, C), accumulated
                                const T* dout,   // (N)
                                const T* a, const T* b, int64_t N, int64_t C, T eps = T(1e-8));

// out[n] = ‖a[n] − b[n]‖₂
template <typename T>
void euclidean_distance_forward(T* out, const T* a, const T* b, int64_t N, int64_t C);

// ∂d/∂a = (a − b)/d, ∂d/∂b = −(a − b)/d; zero where d = 0 (the subgradient PyTorch uses too).
template <typename T>
void euclidean_distance_backward(T* da, T* db, const T* dout, const T* a, const T* b, int64_t N, int64_t C);

// Exact maximum-inner-product search: for each query, the k keys with the largest q·v, best first
// (ties broken by the lower index). `scratch` holds the (M, N) score matrix, computed with one GEMM.
template <typename T>
void mips_topk(int32_t* indices,   // (M, k)
               T* scores,          // (M, k)
               T* scratch,         // (M, N)
               const T* queries,   // (M, C)
               const T* keys,      // (N, C)
               int64_t M, int64_t N, int64_t C, int64_t k);

}  // namespace attend::kernels
