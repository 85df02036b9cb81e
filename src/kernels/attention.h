// Scaled dot-product attention, softmax(QKᵀ·scale + bias + mask)·V   (000 §5, 002 §2-5, 004 §10),
// forward and backward, in three forms that share one description of the problem:
//
//   attention_reference_*  materialises the (B, H, Tq, Tk) probabilities: the oracle for the others;
//   flash_attention_*      tiles keys and queries with an online softmax (004 §10.2): memory O(T·d),
//                          backward recomputes each tile's scores from the saved log-sum-exp;
//   linear_attention_*     φ(x) = elu(x) + 1 feature maps (002 §5.3), O(T·d²), causal by running sums.
//
// Layout: q is (B, Tq, H, d_head), k and v are (B, kv_rows, Hkv, d_head) of which the first Tk rows of
// each sequence are used, the output is (B, Tq, H, d_head): the natural reshape of a (B, T, C)
// projection, or a KV cache preallocated for kv_rows positions. Head h reads key/value head h / (H / Hkv), which covers
// multi-head (Hkv = H), grouped-query (H a multiple of Hkv) and multi-query (Hkv = 1) attention.
#pragma once

#include <cstdint>

namespace attend::kernels {

template <typename T>
struct AttentionParams {
  int64_t B = 1, Tq = 1, Tk = 1;
  int64_t n_heads = 1, n_kv_heads = 1, d_head = 64;
  int64_t kv_capacity = 0;  // rows per sequence in k and v (≥ Tk): a KV cache's max_T; 0 means Tk
  // Decoding (decode_attention_forward) from paged caches: key j of sequence b lies at row
  // block_table[b·block_table_stride + j / 32]·32 + j % 32 of k and v, whatever b (blocks of decode_layout::kBlock
  // positions; each sequence's length in key_lengths). nullptr: at row b·kv_rows() + j.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  double scale = 0.125;  // 1/√d_head: keeps the scores' variance near 1 (002 §2.2)

  // Masks: a masked score is −∞. A query row with every key masked gives zeros and zero gradient.
  bool causal = false;                   // query i (at position q_offset + i) sees keys j ≤ q_offset + i
  int64_t q_offset = 0;                  // absolute position of query 0; keys start at position 0
  // Sliding-window attention (Mistral, Gemma's local layers), with causal: query i also sees only the `window`
  // newest keys, j > q_offset + i − window, itself included. 0: no window.
  int64_t window = 0;
  const int32_t* key_lengths = nullptr;  // (B): keys j ≥ key_lengths[b] are padding; nullptr = none
  const uint8_t* mask = nullptr;         // (B, Tq, Tk): nonzero = may attend; nullptr = none

  // Position-dependent score biases (000 §6.3). RoPE is applied to q and k before attention.
  const double* alibi_slopes = nullptr;  // (H): adds −m_h·|pos_i − j|
  const T* t5_table = nullptr;           // (num_buckets, H): adds table[bucket(j − pos_i), h]
  int32_t t5_num_buckets = 32;
  int32_t t5_max_distance = 128;
  bool t5_bidirectional = true;

  // Attention dropout on the probabilities (003 §12.1): element (b, h, i, j) is kept when
  // random_uniform(dropout_seed, dropout_offset + ((b·H + h)·Tq + i)·Tk + j) ≥ dropout.
  float dropout = 0.0f;
  uint64_t dropout_seed = 0, dropout_offset = 0;

  int64_t group_size() const { return n_heads / n_kv_heads; }
  int64_t kv_rows() const { return kv_capacity > 0 ? kv_capacity : Tk; }
};

// ---- Reference -------------------------------------------------------------------------------------

// S = scale·QKᵀ + bias (masked: −∞), P = softmax(S), P̃ = dropout(P), out = P̃V.
// probs keeps P (before dropout) for backward.
template <typename T>
void attention_reference_forward(T* out,          // (B, Tq, H, d_head)
                                 T* probs,        // (B, H, Tq, Tk)
                                 const T* q,      // (B, Tq, H, d_head)
                                 const T* k,      // (B, Tk, Hkv, d_head)
                                 const T* v,      // (B, Tk, Hkv, d_head)
                                 const AttentionParams<T>& p);

// With P̃ = P ⊙ M/(1 − p_drop):
//   dV += P̃ᵀ dO;   dP̃ = dO Vᵀ;   dP = dP̃ ⊙ M/(1 − p_drop);
//   dS = P ⊙ (dP − rowsum(dP ⊙ P))          (the softmax Jacobian, 002 §1.4)
//   dQ += scale · dS K;   dK += scale · dSᵀ Q;   dtable[bucket, h] += dS   (T5 only)
template <typename T>
void attention_reference_backward(T* dq, T* dk, T* dv,  // accumulated, shapes as q, k, v
                                  T* dt5_table,         // (num_buckets, H), accumulated, or nullptr
                                  const T* dout,        // (B, Tq, H, d_head)
                                  const T* probs,       // (B, H, Tq, Tk) from forward
                                  const T* q, const T* k, const T* v, const AttentionParams<T>& p);

// ---- Tiled (FlashAttention) ------------------------------------------------------------------------

// Elements of scratch memory the tiled kernels need: per-thread tiles, the T5 bucket table and the
// backward's row sums D, O(threads·tile² + B·H·Tq + Tk), never O(Tq·Tk).
template <typename T>
int64_t flash_attention_workspace_size(const AttentionParams<T>& p, int threads);

// Per query tile, for each key tile: S = scale·Q Kᵀ + bias; m' = max(m, rowmax S);
// l ← l·e^{m−m'} + Σ e^{S−m'};  O ← O·e^{m−m'} + e^{S−m'}·V.  Finally O /= l and lse = m + log l.
// Key tiles wholly above the causal diagonal or beyond a sequence's length are skipped.
template <typename T>
void flash_attention_forward(T* out,        // (B, Tq, H, d_head)
                             T* lse,        // (B, H, Tq): log-sum-exp of each score row, for backward
                             const T* q, const T* k, const T* v, const AttentionParams<T>& p,
                             T* workspace);  // flash_attention_workspace_size(...) elements

// FlashAttention-2's backward: D_i = rowsum(dO_i ⊙ O_i); for each key tile and each query tile,
// recompute P = exp(S − lse), then dV += P̃ᵀdO, dS = P ⊙ (dP − D), dQ += scale·dS K, dK += scale·dSᵀQ.
// Threads own (batch, key/value head) pairs, so dK and dV never race.
template <typename T>
void flash_attention_backward(T* dq, T* dk, T* dv, T* dt5_table, const T* dout,
                              const T* out,  // (B, Tq, H, d_head) from forward
                              const T* lse,  // (B, H, Tq) from forward
                              const T* q, const T* k, const T* v, const AttentionParams<T>& p,
                              T* workspace);

// ---- Linear attention ------------------------------------------------------------------------------

// out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z with S = Σ_j φ(k_j) v_jᵀ, z = Σ_j φ(k_j) and φ(x) = elu(x) + 1 > 0.
// Causal: the sums run over j ≤ i. Self-attention only: uses n_heads, n_kv_heads, d_head, B, Tq (= Tk)
// and causal, and ignores the rest (masks, biases, dropout, kv_capacity). O(T·d²) time and O(d²) memory per head.
template <typename T>
int64_t linear_attention_workspace_size(const AttentionParams<T>& p, int threads);

template <typename T>
void linear_attention_forward(T* out, const T* q, const T* k, const T* v, const AttentionParams<T>& p,
                              T* workspace);

// With num_i = φ(q_i)ᵀS and den_i = φ(q_i)ᵀz:  dnum_i = dO_i/den_i,  dden_i = −dO_i·out_i/den_i,
//   dφ(q_i) = S dnum_i + z dden_i;   dφ(k_j) = G_j v_j + g_j;   dv_j = G_jᵀ φ(k_j),
// where G_j = Σ_i φ(q_i) dnum_iᵀ and g_j = Σ_i φ(q_i) dden_i over the queries that see key j
// (all of them, or i ≥ j when causal: a reverse scan). φ'(x) = 1 for x > 0, eˣ otherwise.
template <typename T>
void linear_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                               const AttentionParams<T>& p, T* workspace);

// ---- One query per sequence (generation) ----------------------------------------------------------

// Decoding's attention (001 §10): each of the B sequences has one new query (Tq = 1, at position q_offset)
// against its Tk cached keys. For each (b, h): s_j = scale·q·k_j + bias_j (masked: −∞), p = softmax(s),
// out = Σ_j p_j·v_j, reading the cached rows once, as they are stored: KV is float, uint16_t (IEEE fp16)
// or int8_t with one scale per (position, head) row, k_scales and v_scales (B, kv_rows, Hkv) (nullptr
// otherwise). No conversion buffer: an fp16 cache is read at half the bytes of an fp32 one. The threads
// share blocks of 32 positions (all heads of a position together, in storage order), and the blocks'
// partial softmaxes merge at the end; the blocks are fixed, so the result does not depend on the thread
// count. Masks and biases as above; no dropout (inference), no log-sum-exp (no backward). A query whose
// keys are all masked gets zeros.
int64_t decode_attention_workspace_size(const AttentionParams<float>& p, int threads);
template <typename KV>
void decode_attention_forward(float* out,       // (B, 1, H, d_head)
                              const float* q,   // (B, 1, H, d_head)
                              const KV* k, const KV* v, const float* k_scales, const float* v_scales,
                              const AttentionParams<float>& p,
                              float* workspace);  // decode_attention_workspace_size(...) floats

}  // namespace attend::kernels
