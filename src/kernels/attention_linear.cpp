// Linear attention (Katharopoulos et al. 2020; 002 §5.3, 003 §11.3): softmax(qkᵀ) replaced by the
// kernel φ(q)ᵀφ(k) with φ(x) = elu(x) + 1, so Σ_j φ(q_i)ᵀφ(k_j) v_j = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) and
// the T×T matrix is never needed.
#include "kernels/attention.h"
#include "kernels/parallel.h"

#include <algorithm>
#include <cmath>

namespace attend::kernels {
namespace {

template <typename T>
T phi(T x) {
  return x > T(0) ? x + T(1) : std::exp(x);
}
template <typename T>
T phi_derivative(T x) {
  return x > T(0) ? T(1) : std::exp(x);
}

// S += φ(k) vᵀ and z += φ(k) for one key: fk receives φ(k).
template <typename T>
void accumulate_key(T* S, T* z, T* fk, const T* kj, const T* vj, int64_t D) {
  for (int64_t a = 0; a < D; ++a) fk[a] = phi(kj[a]);
  for (int64_t a = 0; a < D; ++a) {
    z[a] += fk[a];
    for (int64_t c = 0; c < D; ++c) S[a * D + c] += fk[a] * vj[c];
  }
}

// For one query: fq = φ(q), num = φ(q)ᵀS; returns the denominator φ(q)ᵀz. The output row is num/den.
template <typename T>
T query_row(T* num, T* fq, const T* qi, const T* S, const T* z, int64_t D) {
  for (int64_t a = 0; a < D; ++a) fq[a] = phi(qi[a]);
  T den = 0;
  for (int64_t a = 0; a < D; ++a) den += fq[a] * z[a];
  for (int64_t c = 0; c < D; ++c) {
    num[c] = 0;
    for (int64_t a = 0; a < D; ++a) num[c] += fq[a] * S[a * D + c];
  }
  return den;
}

// Per-thread scratch: S and G are (D, D); z, g, the φ rows, num and the row gradients are (D).
template <typename T>
int64_t per_thread_size(const AttentionParams<T>& p) {
  return 2 * p.d_head * p.d_head + 6 * p.d_head;
}

}  // namespace

template <typename T>
int64_t linear_attention_workspace_size(const AttentionParams<T>& p, int threads) {
  return threads * per_thread_size(p) + p.B * p.n_heads * p.Tq * (p.d_head + 1);
}

template <typename T>
void linear_attention_forward(T* out, const T* q, const T* k, const T* v, const AttentionParams<T>& p, T* workspace) {
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = p.d_head, Tn = p.Tq;
  parallel_for(p.B * H, 1, [&](int64_t w0, int64_t w1) {
    T* S = workspace + thread_index() * per_thread_size(p);  // Σ φ(k_j) v_jᵀ, (D, D)
    T* z = S + D * D;                                         // Σ φ(k_j), (D)
    T* fq = z + D;
    T* fk = fq + D;
    T* num = fk + D;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t b = w / H, h = w % H, kvh = h / p.group_size();
      std::fill_n(S, D * D, T(0));
      std::fill_n(z, D, T(0));
      auto add_key = [&](int64_t j) {
        const int64_t row = ((b * Tn + j) * Hkv + kvh) * D;
        accumulate_key(S, z, fk, k + row, v + row, D);
      };
      if (!p.causal)
        for (int64_t j = 0; j < Tn; ++j) add_key(j);
      for (int64_t i = 0; i < Tn; ++i) {
        if (p.causal) add_key(i);
        const T den = query_row(num, fq, q + ((b * Tn + i) * H + h) * D, S, z, D);
        T* oi = out + ((b * Tn + i) * H + h) * D;
        for (int64_t c = 0; c < D; ++c) oi[c] = num[c] / den;
      }
    }
  });
}

template <typename T>
void linear_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                               const AttentionParams<T>& p, T* workspace) {
  const int64_t H = p.n_heads, Hkv = p.n_kv_heads, D = p.d_head, Tn = p.Tq;
  T* row_grads = workspace + num_threads() * per_thread_size(p);  // dnum_i (D) and dden_i per (b, h, i)
  // One thread per (batch, key/value head): it owns dk and dv of that head.
  parallel_for(p.B * Hkv, 1, [&](int64_t w0, int64_t w1) {
    T* S = workspace + thread_index() * per_thread_size(p);
    T* G = S + D * D;
    T* z = G + D * D;
    T* g = z + D;
    T* fq = g + D;
    T* fk = fq + D;
    T* num = fk + D;
    T* tmp = num + D;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t b = w / Hkv, kvh = w % Hkv;
      for (int64_t h = kvh * p.group_size(); h < (kvh + 1) * p.group_size(); ++h) {
        auto key_phi = [&](int64_t j) {
          const T* kj = k + ((b * Tn + j) * Hkv + kvh) * D;
          for (int64_t a = 0; a < D; ++a) fk[a] = phi(kj[a]);
          return v + ((b * Tn + j) * Hkv + kvh) * D;
        };
        // Pass 1 (forward order): S_i, z_i as in forward; dnum_i, dden_i; dq_i.
        std::fill_n(S, D * D, T(0));
        std::fill_n(z, D, T(0));
        auto add_key = [&](int64_t j) {
          const int64_t row = ((b * Tn + j) * Hkv + kvh) * D;
          accumulate_key(S, z, fk, k + row, v + row, D);
        };
        if (!p.causal)
          for (int64_t j = 0; j < Tn; ++j) add_key(j);
        for (int64_t i = 0; i < Tn; ++i) {
          if (p.causal) add_key(i);
          const T* qi = q + ((b * Tn + i) * H + h) * D;
          const T* doi = dout + ((b * Tn + i) * H + h) * D;
          T* dnum = row_grads + ((b * H + h) * Tn + i) * (D + 1);
          const T den = query_row(num, fq, qi, S, z, D);
          T dout_dot_out = 0;  // dO_i · out_i = dO_i · num_i / den_i
          for (int64_t c = 0; c < D; ++c) {
            dout_dot_out += doi[c] * num[c] / den;
            dnum[c] = doi[c] / den;
          }
          const T dden = -dout_dot_out / den;
          dnum[D] = dden;
          T* dqi = dq + ((b * Tn + i) * H + h) * D;
          for (int64_t a = 0; a < D; ++a) {  // dφ(q_i) = S dnum_i + z dden_i, then the chain through φ
            T dfq = z[a] * dden;
            for (int64_t c = 0; c < D; ++c) dfq += S[a * D + c] * dnum[c];
            dqi[a] += dfq * phi_derivative(qi[a]);
          }
        }
        // Pass 2: G_j = Σ_{i sees j} φ(q_i) dnum_iᵀ, g_j likewise with dden_i; then dk_j, dv_j.
        std::fill_n(G, D * D, T(0));
        std::fill_n(g, D, T(0));
        auto add_query = [&](int64_t i) {
          const T* qi = q + ((b * Tn + i) * H + h) * D;
          const T* dnum = row_grads + ((b * H + h) * Tn + i) * (D + 1);
          for (int64_t a = 0; a < D; ++a) {
            const T f = phi(qi[a]);
            g[a] += f * dnum[D];
            for (int64_t c = 0; c < D; ++c) G[a * D + c] += f * dnum[c];
          }
        };
        if (!p.causal)
          for (int64_t i = 0; i < Tn; ++i) add_query(i);
        for (int64_t j = Tn - 1; j >= 0; --j) {
          if (p.causal) add_query(j);
          const T* kj = k + ((b * Tn + j) * Hkv + kvh) * D;
          const T* vj = key_phi(j);
          T* dkj = dk + ((b * Tn + j) * Hkv + kvh) * D;
          T* dvj = dv + ((b * Tn + j) * Hkv + kvh) * D;
          for (int64_t a = 0; a < D; ++a) {  // dφ(k_j) = G v_j + g
            T dfk = g[a];
            for (int64_t c = 0; c < D; ++c) dfk += G[a * D + c] * vj[c];
            dkj[a] += dfk * phi_derivative(kj[a]);
          }
          for (int64_t c = 0; c < D; ++c) {  // dv_j = Gᵀ φ(k_j)
            tmp[c] = 0;
            for (int64_t a = 0; a < D; ++a) tmp[c] += G[a * D + c] * fk[a];
            dvj[c] += tmp[c];
          }
        }
      }
    }
  });
}

#define ATTEND_INSTANTIATE(T)                                                                                \
  template int64_t linear_attention_workspace_size<T>(const AttentionParams<T>&, int);                       \
  template void linear_attention_forward<T>(T*, const T*, const T*, const T*, const AttentionParams<T>&, T*); \
  template void linear_attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,              \
                                             const AttentionParams<T>&, T*);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels
