// Positional encodings: sinusoidal and learned tables added at the embedding, RoPE applied to queries
// and keys, and the attention-score biases of ALiBi and T5   (000 §6.2-6.3, 002 §3).
#pragma once

#include <cstdint>

namespace attend::kernels {

// PE(pos, 2i) = sin(pos / base^(2i/C)),  PE(pos, 2i+1) = cos(pos / base^(2i/C))   (000 eq. 28-29)
// for pos = start, ..., start + T − 1. With odd C the last column is a sine.
template <typename T>
void sinusoidal_table(T* out,  // (T, C)
                      int64_t start, int64_t T_len, int64_t C, double base = 10000.0);

// out[b, t] = inp[b, t] + table[t]: adds a learned or sinusoidal position table to embeddings.
template <typename T>
void add_positions_forward(T* out,          // (B, T, C)
                           const T* inp,    // (B, T, C)
                           const T* table,  // (T, C), rows for positions start .. start+T−1
                           int64_t B, int64_t T_len, int64_t C);

// dinp += dout;  dtable[t] += Σ_b dout[b, t]  (dtable may be nullptr for a fixed table).
template <typename T>
void add_positions_backward(T* dinp, T* dtable, const T* dout, int64_t B, int64_t T_len, int64_t C);

// How RoPE's frequencies are set and stretched for longer contexts.
struct RopeScaling {
  double base = 10000.0;       // θ_i = base^(−2i/d)
  double base_scale = 1.0;     // "base scaling" (000 §6.3): θ_i = (α·base)^(−2i/d); e.g. 4 for a 4× longer context
  double ntk_factor = 1.0;     // NTK-aware scaling by s: base' = base · s^(d/(d−2)); e.g. 8 for 8× extension
  double position_scale = 1.0; // linear position interpolation: positions are multiplied by this (e.g. 0.25)
  // Llama 3.1's frequency-dependent scaling (Hugging Face's rope_type "llama3"), on when llama3_factor > 0:
  // with λ_i = 2π/θ_i and the context L₀ the model was trained at, θ_i stays when λ_i < L₀/high_freq_factor,
  // becomes θ_i/factor when λ_i > L₀/low_freq_factor, and between them s·θ_i + (1 − s)·θ_i/factor with
  // s = (L₀/λ_i − low_freq_factor)/(high_freq_factor − low_freq_factor).
  double llama3_factor = 0.0, llama3_low_freq_factor = 1.0, llama3_high_freq_factor = 4.0;
  // Dynamic NTK (rope_type "dynamic"), on when dynamic_factor > 0: a call whose positions reach L > L₀ uses
  // base · (factor·L/L₀ − (factor − 1))^(d/(d−2)), so the frequencies depend on how far the call reaches.
  double dynamic_factor = 0.0;
  int64_t original_context = 0;  // L₀ (llama3 and dynamic)
};
// The frequency θ_i of pair (2i, 2i+1) in a head of size d_head, i = 0 .. d_head/2 − 1, for a call whose
// positions reach `length` (dynamic scaling only reads it).
double rope_frequency(int64_t i, int64_t d_head, const RopeScaling& scaling, int64_t length = 0);

// cos/sin tables for positions start .. start+T−1: cos[t, i] = cos(pos_t · θ_i), computed in double (with
// dynamic scaling, θ for a call reaching start + T).
template <typename T>
void rope_tables(T* cos_table,  // (T, d_head/2)
                 T* sin_table,  // (T, d_head/2)
                 int64_t start, int64_t T_len, int64_t d_head, const RopeScaling& scaling);

// Rotates each consecutive pair (x_2i, x_2i+1) of every head by the angle of its position
// (000 eq. 30-31, 003 §8.2):
//   y_2i   = x_2i·cos − x_2i+1·sin
//   y_2i+1 = x_2i·sin + x_2i+1·cos
// out may equal inp (in place).
template <typename T>
void rope_forward(T* out,             // (B, T, H, d_head)
                  const T* inp,       // (B, T, H, d_head)
                  const T* cos_table, // (T, d_head/2)
                  const T* sin_table, // (T, d_head/2)
                  int64_t B, int64_t T_len, int64_t H, int64_t d_head);

// A rotation's inverse is its transpose, so backward rotates the gradient by −θ:
//   dx_2i += dy_2i·cos + dy_2i+1·sin,   dx_2i+1 += −dy_2i·sin + dy_2i+1·cos
template <typename T>
void rope_backward(T* dinp,            // (B, T, H, d_head), accumulated
                   const T* dout,      // (B, T, H, d_head)
                   const T* cos_table, const T* sin_table, int64_t B, int64_t T_len, int64_t H, int64_t d_head);

// ALiBi head slopes (Press et al.): for n a power of two, m_h = 2^(−8(h+1)/n); otherwise the slopes of
// the largest power of two n₀ < n, then every other slope of 2n₀ for the remaining heads.
void alibi_slopes(double* slopes,  // (H)
                  int64_t H);

// scores[h, i, j] += −m_h · |(i + q_offset) − j|   (000 §6.3). ALiBi has no parameters, so its backward
// is the identity on the scores' gradient.
template <typename T>
void alibi_bias_forward(T* scores,         // (H, Tq, Tk), updated in place
                        const double* slopes, int64_t H, int64_t Tq, int64_t Tk, int64_t q_offset);

// T5's relative position bucket for key position minus query position (Raffel et al. 2020): half the
// buckets are exact small distances, the rest grow logarithmically up to max_distance. Bidirectional
// buckets split the range between keys before and after the query; causal ones see only the past.
int32_t t5_relative_bucket(int64_t relative_position, bool bidirectional, int32_t num_buckets,
                           int32_t max_distance);

// scores[h, i, j] += table[bucket(j − (i + q_offset)), h]
template <typename T>
void t5_bias_forward(T* scores,        // (H, Tq, Tk), updated in place
                     const T* table,   // (num_buckets, H), as in Hugging Face's relative_attention_bias
                     int64_t H, int64_t Tq, int64_t Tk, int64_t q_offset, bool bidirectional, int32_t num_buckets,
                     int32_t max_distance);

// dtable[bucket(j − i), h] += dscores[h, i, j]
template <typename T>
void t5_bias_backward(T* dtable,         // (num_buckets, H), accumulated
                      const T* dscores,  // (H, Tq, Tk)
                      int64_t H, int64_t Tq, int64_t Tk, int64_t q_offset, bool bidirectional, int32_t num_buckets,
                      int32_t max_distance);

}  // namespace attend::kernels
