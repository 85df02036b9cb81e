// The reference attention: every score materialised, plain loops, written to be obviously right.
#include "kernels/attention.h"
#include "kernels/attention_scores.h"
#include "kernels/dropout.h"
#include "kernels/parallel.h"

#include <limits>
#include <vector>

namespace attend::kernels {

template <typename T>
void attention_reference_forward(T* out, T* probs, const T* q, const T* k, const T* v, const AttentionParams<T>& p) {
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = p.d_head, Tq = p.Tq, Tk = p.Tk;
  std::vector<int32_t> buckets(detail::t5_bucket_table_size(p));
  detail::fill_t5_buckets(buckets.data(), p);
  parallel_for(p.B * H * Tq, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (H * Tq), h = r / Tq % H, i = r % Tq, kvh = h / p.group_size();
      const T* qi = q + ((b * Tq + i) * H + h) * D;
      T* P = probs + r * Tk;
      for (int64_t j = 0; j < Tk; ++j) {  // S_ij = scale · q_i · k_j
        const T* kj = k + ((b * p.kv_rows() + j) * Hkv + kvh) * D;
        double dot = 0.0;
        for (int64_t d = 0; d < D; ++d) dot += double{qi[d]} * kj[d];
        P[j] = static_cast<T>(dot * p.scale);
      }
      detail::bias_and_mask(P, Tk, p, buckets.data(), b, h, i, i + 1, 0, Tk);
      T m = -std::numeric_limits<T>::infinity();  // P = softmax(S), zeros if every key is masked
      for (int64_t j = 0; j < Tk; ++j) m = std::max(m, P[j]);
      double sum = 0.0;
      for (int64_t j = 0; j < Tk; ++j) sum += P[j] = m == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(P[j] - m);
      for (int64_t j = 0; j < Tk; ++j) P[j] = sum > 0.0 ? static_cast<T>(P[j] / sum) : T(0);
      T* oi = out + ((b * Tq + i) * H + h) * D;  // out_i = Σ_j P̃_ij v_j
      for (int64_t d = 0; d < D; ++d) oi[d] = T(0);
      for (int64_t j = 0; j < Tk; ++j) {
        const T pj = P[j] * dropout_keep_scale<T>(detail::dropout_index(p, b, h, i, j), p.dropout, p.dropout_seed);
        const T* vj = v + ((b * p.kv_rows() + j) * Hkv + kvh) * D;
        for (int64_t d = 0; d < D; ++d) oi[d] += pj * vj[d];
      }
    }
  });
}

template <typename T>
void attention_reference_backward(T* dq, T* dk, T* dv, T* dt5_table, const T* dout, const T* probs, const T* q,
                                  const T* k, const T* v, const AttentionParams<T>& p) {
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = p.d_head, Tq = p.Tq, Tk = p.Tk;
  std::vector<int32_t> buckets(detail::t5_bucket_table_size(p));
  detail::fill_t5_buckets(buckets.data(), p);
  // One thread per key/value head: it owns dK, dV of that head and dQ, dtable columns of its group.
  parallel_for(Hkv, 1, [&](int64_t g0, int64_t g1) {
    std::vector<T> dP(Tk);
    for (int64_t kvh = g0; kvh < g1; ++kvh) {
      for (int64_t b = 0; b < p.B; ++b) {
        for (int64_t h = kvh * p.group_size(); h < (kvh + 1) * p.group_size(); ++h) {
          for (int64_t i = 0; i < Tq; ++i) {
            const T* P = probs + ((b * H + h) * Tq + i) * Tk;
            const T* doi = dout + ((b * Tq + i) * H + h) * D;
            double rowdot = 0.0;  // Σ_j dP_ij P_ij
            for (int64_t j = 0; j < Tk; ++j) {
              const T keep = dropout_keep_scale<T>(detail::dropout_index(p, b, h, i, j), p.dropout, p.dropout_seed);
              const T* vj = v + ((b * p.kv_rows() + j) * Hkv + kvh) * D;
              T* dvj = dv + ((b * p.kv_rows() + j) * Hkv + kvh) * D;
              double dpt = 0.0;  // dP̃_ij = dO_i · v_j
              for (int64_t d = 0; d < D; ++d) {
                dpt += double{doi[d]} * vj[d];
                dvj[d] += P[j] * keep * doi[d];  // dV_j += P̃_ij dO_i
              }
              dP[j] = static_cast<T>(dpt) * keep;
              rowdot += double{dP[j]} * P[j];
            }
            const T* qi = q + ((b * Tq + i) * H + h) * D;
            T* dqi = dq + ((b * Tq + i) * H + h) * D;
            for (int64_t j = 0; j < Tk; ++j) {
              const T dS = static_cast<T>(P[j] * (dP[j] - rowdot));
              if (dS == T(0)) continue;  // masked keys (P = 0) contribute nothing
              const T* kj = k + ((b * p.kv_rows() + j) * Hkv + kvh) * D;
              T* dkj = dk + ((b * p.kv_rows() + j) * Hkv + kvh) * D;
              for (int64_t d = 0; d < D; ++d) {
                dqi[d] += static_cast<T>(p.scale) * dS * kj[d];
                dkj[d] += static_cast<T>(p.scale) * dS * qi[d];
              }
              if (dt5_table != nullptr) dt5_table[detail::t5_bucket(buckets.data(), p, i, j) * H + h] += dS;
            }
          }
        }
      }
    }
  });
}

#define ATTEND_INSTANTIATE(T)                                                                                 \
  template void attention_reference_forward<T>(T*, T*, const T*, const T*, const T*, const AttentionParams<T>&); \
  template void attention_reference_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*, \
                                                const AttentionParams<T>&);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels
