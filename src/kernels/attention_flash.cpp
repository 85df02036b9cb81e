// Tiled attention with an online softmax (FlashAttention, Dao et al. 2022; the backward of
// FlashAttention-2): the Tq×Tk score matrix never exists, only one Br×Bc tile per thread.
#include "kernels/attention.h"
#include "kernels/attention_scores.h"
#include "kernels/dropout.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "kernels/vec_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attend::kernels {
namespace {

constexpr int64_t kBr = 128;   // query rows per tile
constexpr int64_t kBc = 128;  // keys per tile

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Per-thread scratch, carved from the caller's workspace.
template <typename T>
struct Tiles {
  T* S;       // (Br, Bc) scores, then probabilities
  T* S2;      // (Br, Bc) backward: P̃, then dP, then dS
  T* acc;     // forward: (Br, d_head) output accumulator; backward: (Bc, d_head) dK accumulator
  T* acc2;    // backward: (Bc, d_head) dV accumulator
  T* m;       // (Br) running row maxima
  T* l;       // (Br) running row sums
  T* dtable;  // (num_buckets, H) backward's private T5 gradient, or unused
};

template <typename T>
int64_t per_thread_size(const AttentionParams<T>& p) {
  const int64_t t5 = p.t5_table != nullptr ? int64_t{p.t5_num_buckets} * p.n_heads : 0;
  return 2 * kBr * kBc + 2 * std::max(kBr, kBc) * p.d_head + 2 * kBr + t5;
}

template <typename T>
Tiles<T> tiles_for_thread(T* workspace, const AttentionParams<T>& p, int thread) {
  T* w = workspace + thread * per_thread_size(p);
  Tiles<T> t;
  t.S = w;
  t.S2 = t.S + kBr * kBc;
  t.acc = t.S2 + kBr * kBc;
  t.acc2 = t.acc + std::max(kBr, kBc) * p.d_head;
  t.m = t.acc2 + std::max(kBr, kBc) * p.d_head;
  t.l = t.m + kBr;
  t.dtable = t.l + kBr;
  return t;
}

// Where the shared (non-per-thread) parts of the workspace start: the T5 buckets, then D.
template <typename T>
int32_t* bucket_table(T* workspace, const AttentionParams<T>& p, int threads) {
  return reinterpret_cast<int32_t*>(workspace + threads * per_thread_size(p));
}
template <typename T>
T* row_sums(T* workspace, const AttentionParams<T>& p, int threads) {
  return workspace + threads * per_thread_size(p) + detail::t5_bucket_table_size(p);  // int32 fits in T
}

// One row of the online softmax (kept out of line so its loops vectorize, see norm.cpp): folds the
// scores s[0..bc) into the running maximum m and sum l, overwrites s with e^{s − m'} and returns the
// factor e^{m − m'} by which the row's output accumulator must be rescaled. A row whose keys are all
// masked so far gets s = 0 and factor 1.
template <typename T>
[[gnu::noinline]] T online_softmax_row(T* s, int64_t bc, T& m, T& l) {
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < bc; ++c) mx = s[c] > mx ? s[c] : mx;
  const T m_new = m > mx ? m : mx;
  if (m_new == -std::numeric_limits<T>::infinity()) {
    std::fill_n(s, bc, T(0));
    return T(1);
  }
  const T rescale = vec::exp(m - m_new);  // 0 on the first visible tile (m = −∞)
  const T row_sum = static_cast<T>(vec::sum<T>(bc, [&](int64_t c) { return s[c] = vec::exp(s[c] - m_new); }));
  l = l * rescale + row_sum;
  m = m_new;
  return rescale;
}

// P = exp(S − lse) for one row of the backward; rows whose lse is −∞ (all masked) get P = 0.
template <typename T>
[[gnu::noinline]] void probabilities_row(T* s, int64_t bc, T row_lse) {
  if (row_lse == -std::numeric_limits<T>::infinity()) {
    std::fill_n(s, bc, T(0));
    return;
  }
#pragma omp simd
  for (int64_t c = 0; c < bc; ++c) s[c] = vec::exp(s[c] - row_lse);
}

// dS = P ⊙ (dP − D) for one row without dropout (with dropout the caller applies the mask first).
template <typename T>
[[gnu::noinline]] void score_gradient_row(T* ds, const T* prob, int64_t bc, T Di) {
#pragma omp simd
  for (int64_t c = 0; c < bc; ++c) ds[c] = prob[c] * (ds[c] - Di);
}

}  // namespace

template <typename T>
int64_t flash_attention_workspace_size(const AttentionParams<T>& p, int threads) {
  return threads * per_thread_size(p) + detail::t5_bucket_table_size(p) + p.B * p.n_heads * p.Tq;
}

template <typename T>
void flash_attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttentionParams<T>& p,
                             T* workspace) {
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = p.d_head, Tq = p.Tq, Tk = p.Tk;
  const int threads = num_threads();
  int32_t* buckets = bucket_table(workspace, p, threads);
  detail::fill_t5_buckets(buckets, p);
  const int64_t q_tiles = ceil_div(Tq, kBr);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();

  parallel_for(p.B * H * q_tiles, 1, [&](int64_t w0, int64_t w1) {
    Tiles<T> t = tiles_for_thread(workspace, p, thread_index());
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t b = w / (H * q_tiles), h = w / q_tiles % H, kvh = h / p.group_size();
      const int64_t i0 = w % q_tiles * kBr, i1 = std::min(i0 + kBr, Tq), br = i1 - i0;
      const T* Q = q + ((b * Tq + i0) * H + h) * D;  // rows of this tile, leading dimension H·D
      std::fill_n(t.m, br, kNegInf);
      std::fill_n(t.l, br, T(0));
      std::fill_n(t.acc, br * D, T(0));
      for (int64_t j0 = 0; j0 < Tk; j0 += kBc) {
        const int64_t j1 = std::min(j0 + kBc, Tk), bc = j1 - j0;
        if (detail::tile_is_masked(p, b, i0, i1, j0, j1)) continue;
        const T* K = k + ((b * p.kv_rows() + j0) * Hkv + kvh) * D;
        const T* V = v + ((b * p.kv_rows() + j0) * Hkv + kvh) * D;
        gemm<T>(false, true, br, bc, D, static_cast<T>(p.scale), Q, H * D, K, Hkv * D, T(0), t.S, kBc);
        if (!detail::tile_is_plain(p, b, i0, i1, j0, j1)) detail::bias_and_mask(t.S, kBc, p, buckets, b, h, i0, i1, j0, j1);
        for (int64_t r = 0; r < br; ++r) {
          T* s = t.S + r * kBc;
          const T rescale = online_softmax_row(s, bc, t.m[r], t.l[r]);
          if (rescale != T(1)) {
            T* o = t.acc + r * D;
            for (int64_t d = 0; d < D; ++d) o[d] *= rescale;
          }
          if (p.dropout > 0.0f) {  // P̃ = P ⊙ M/(1 − p); l keeps the undropped sum
            T scales[kBc];
            dropout_keep_scales(scales, bc, detail::dropout_index(p, b, h, i0 + r, j0), p.dropout, p.dropout_seed);
            for (int64_t c = 0; c < bc; ++c) s[c] *= scales[c];
          }
        }
        gemm<T>(false, false, br, D, bc, T(1), t.S, kBc, V, Hkv * D, T(1), t.acc, D);
      }
      for (int64_t r = 0; r < br; ++r) {
        T* o = out + ((b * Tq + i0 + r) * H + h) * D;
        const T inv_l = t.l[r] > T(0) ? T(1) / t.l[r] : T(0);
        for (int64_t d = 0; d < D; ++d) o[d] = t.acc[r * D + d] * inv_l;
        lse[(b * H + h) * Tq + i0 + r] = t.l[r] > T(0) ? t.m[r] + std::log(t.l[r]) : kNegInf;
      }
    }
  });
}

template <typename T>
void flash_attention_backward(T* dq, T* dk, T* dv, T* dt5_table, const T* dout, const T* out, const T* lse,
                              const T* q, const T* k, const T* v, const AttentionParams<T>& p, T* workspace) {
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = p.d_head, Tq = p.Tq, Tk = p.Tk;
  const int threads = num_threads();
  int32_t* buckets = bucket_table(workspace, p, threads);
  detail::fill_t5_buckets(buckets, p);
  const int64_t table_size = p.t5_table != nullptr ? int64_t{p.t5_num_buckets} * H : 0;
  for (int t = 0; t < threads; ++t) std::fill_n(tiles_for_thread(workspace, p, t).dtable, table_size, T(0));

  // D_i = Σ_d dO_id · O_id = Σ_j dP̃_ij P̃_ij: the softmax backward's row term, precomputed once.
  T* Dsum = row_sums(workspace, p, threads);
  parallel_for(p.B * Tq * H, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (Tq * H), i = r / H % Tq, h = r % H;
      double s = 0.0;
      for (int64_t d = 0; d < D; ++d) s += double{dout[r * D + d]} * out[r * D + d];
      Dsum[(b * H + h) * Tq + i] = static_cast<T>(s);
    }
  });

  parallel_for(p.B * Hkv, 1, [&](int64_t w0, int64_t w1) {
    Tiles<T> t = tiles_for_thread(workspace, p, thread_index());
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t b = w / Hkv, kvh = w % Hkv;
      for (int64_t j0 = 0; j0 < Tk; j0 += kBc) {
        const int64_t j1 = std::min(j0 + kBc, Tk), bc = j1 - j0;
        const T* K = k + ((b * p.kv_rows() + j0) * Hkv + kvh) * D;
        const T* V = v + ((b * p.kv_rows() + j0) * Hkv + kvh) * D;
        std::fill_n(t.acc, bc * D, T(0));   // dK of this key tile
        std::fill_n(t.acc2, bc * D, T(0));  // dV of this key tile
        for (int64_t h = kvh * p.group_size(); h < (kvh + 1) * p.group_size(); ++h) {
          for (int64_t i0 = 0; i0 < Tq; i0 += kBr) {
            const int64_t i1 = std::min(i0 + kBr, Tq), br = i1 - i0;
            if (detail::tile_is_masked(p, b, i0, i1, j0, j1)) continue;
            const T* Q = q + ((b * Tq + i0) * H + h) * D;
            const T* dO = dout + ((b * Tq + i0) * H + h) * D;
            // P = exp(S − lse): the forward's probabilities, recomputed.
            gemm<T>(false, true, br, bc, D, static_cast<T>(p.scale), Q, H * D, K, Hkv * D, T(0), t.S, kBc);
            if (!detail::tile_is_plain(p, b, i0, i1, j0, j1))
              detail::bias_and_mask(t.S, kBc, p, buckets, b, h, i0, i1, j0, j1);
            for (int64_t r = 0; r < br; ++r) {
              T* s = t.S + r * kBc;
              T* s2 = t.S2 + r * kBc;
              probabilities_row(s, bc, lse[(b * H + h) * Tq + i0 + r]);
              T scales[kBc];  // P̃
              if (p.dropout > 0.0f)
                dropout_keep_scales(scales, bc, detail::dropout_index(p, b, h, i0 + r, j0), p.dropout, p.dropout_seed);
              for (int64_t c = 0; c < bc; ++c) s2[c] = p.dropout > 0.0f ? s[c] * scales[c] : s[c];
            }
            gemm<T>(true, false, bc, D, br, T(1), t.S2, kBc, dO, H * D, T(1), t.acc2, D);  // dV += P̃ᵀ dO
            gemm<T>(false, true, br, bc, D, T(1), dO, H * D, V, Hkv * D, T(0), t.S2, kBc);  // dP̃ = dO Vᵀ
            for (int64_t r = 0; r < br; ++r) {  // dS = P ⊙ (dP − D), dP = dP̃ ⊙ M/(1 − p)
              const T Di = Dsum[(b * H + h) * Tq + i0 + r];
              T* s2 = t.S2 + r * kBc;
              if (p.dropout > 0.0f) {
                T scales[kBc];
                dropout_keep_scales(scales, bc, detail::dropout_index(p, b, h, i0 + r, j0), p.dropout, p.dropout_seed);
                for (int64_t c = 0; c < bc; ++c) s2[c] *= scales[c];
              }
              score_gradient_row(s2, t.S + r * kBc, bc, Di);
              if (dt5_table != nullptr)
                for (int64_t c = 0; c < bc; ++c)
                  t.dtable[detail::t5_bucket(buckets, p, i0 + r, j0 + c) * H + h] += s2[c];
            }
            T* dQ = dq + ((b * Tq + i0) * H + h) * D;
            gemm<T>(false, false, br, D, bc, static_cast<T>(p.scale), t.S2, kBc, K, Hkv * D, T(1), dQ, H * D);
            gemm<T>(true, false, bc, D, br, static_cast<T>(p.scale), t.S2, kBc, Q, H * D, T(1), t.acc, D);
          }
        }
        for (int64_t c = 0; c < bc; ++c) {
          T* dkj = dk + ((b * p.kv_rows() + j0 + c) * Hkv + kvh) * D;
          T* dvj = dv + ((b * p.kv_rows() + j0 + c) * Hkv + kvh) * D;
          for (int64_t d = 0; d < D; ++d) {
            dkj[d] += t.acc[c * D + d];
            dvj[d] += t.acc2[c * D + d];
          }
        }
      }
    }
  });
  if (dt5_table != nullptr)
    for (int t = 0; t < threads; ++t) {
      const T* partial = tiles_for_thread(workspace, p, t).dtable;
      for (int64_t e = 0; e < table_size; ++e) dt5_table[e] += partial[e];
    }
}

#define ATTEND_INSTANTIATE(T)                                                                                 \
  template int64_t flash_attention_workspace_size<T>(const AttentionParams<T>&, int);                         \
  template void flash_attention_forward<T>(T*, T*, const T*, const T*, const T*, const AttentionParams<T>&, T*); \
  template void flash_attention_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*,  \
                                            const T*, const AttentionParams<T>&, T*);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels
