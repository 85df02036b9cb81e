#include "nn/layers.h"
#include "nn/lora.h"

#include "kernels/activation.h"
#include "kernels/convert.h"
#include "kernels/cpu.h"
#include "kernels/dropout.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/parallel.h"
#include "kernels/softmax.h"

#include <attend/error.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>

namespace attend::nn {
namespace {

Activation activation_of(FfnKind kind) {
  switch (kind) {
    case FfnKind::ReLU: return Activation::ReLU;
    case FfnKind::GELU: return Activation::GELU;
    case FfnKind::GELUTanh: return Activation::GELUTanh;
    case FfnKind::SwiGLU: return Activation::SiLU;
    case FfnKind::GeGLU: return Activation::GELUTanh;
  }
  return Activation::GELU;
}

// The rows of x (a (N, C) tensor) at `rows`, as a (rows, C) tensor; and the inverse, adding back.
Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  const int64_t C = x.size(-1);
  Tensor out({static_cast<int64_t>(rows.size()), C});
  for (size_t r = 0; r < rows.size(); ++r) std::memcpy(out.data() + r * C, x.data() + rows[r] * C, C * sizeof(float));
  return out;
}

kernels::Half half_of(Precision p) { return p == Precision::BF16 ? kernels::Half::BF16 : kernels::Half::F16; }

// Rounded copies of activations and gradients, reused from call to call (the model runs one layer at a time).
uint16_t* rounded(int slot, Precision p, const float* x, int64_t n) {
  thread_local std::vector<uint16_t> buffers[2];
  std::vector<uint16_t>& b = buffers[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  kernels::round_to_half(half_of(p), b.data(), x, n);
  return b.data();
}

// x rounded to bf16 or fp16 and widened back to fp32: what a 16-bit GEMM multiplies, as floats.
const float* rounded_floats(Precision p, const float* x, int64_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(static_cast<size_t>(n));
  const uint16_t* bits = rounded(1, p, x, n);
  if (p == Precision::BF16)
    kernels::bf16_to_float(buffer.data(), bits, n);
  else
    kernels::half_to_float(buffer.data(), bits, n);
  return buffer.data();
}

}  // namespace

kernels::Half half_type(WeightType t) {
  if (t == WeightType::BF16) return kernels::Half::BF16;
  if (t == WeightType::F16) return kernels::Half::F16;
  throw Error(fmt::format("internal: weight type {} is not a 16-bit type", weight_type_name(t)));
}

kernels::QuantType quant_type(WeightType t) {
  switch (t) {
    case WeightType::Q8_0: return kernels::QuantType::Q8_0;
    case WeightType::Q4_0: return kernels::QuantType::Q4_0;
    case WeightType::Q4_1: return kernels::QuantType::Q4_1;
    case WeightType::Q5_0: return kernels::QuantType::Q5_0;
    case WeightType::Q5_1: return kernels::QuantType::Q5_1;
    case WeightType::Q4_K: return kernels::QuantType::Q4_K;
    case WeightType::Q5_K: return kernels::QuantType::Q5_K;
    case WeightType::Q6_K: return kernels::QuantType::Q6_K;
    default: break;
  }
  throw Error(fmt::format("weight type {} is not a block-quantized type", weight_type_name(t)));
}

WeightType block_fallback(WeightType t) {
  return t == WeightType::Q4_K ? WeightType::Q5_0 : t == WeightType::Q5_K ? WeightType::Q5_1 : WeightType::Q8_0;
}

void set_quantized(Parameter& p, std::vector<QuantizedRows> segments) {
  const int64_t C = p.value.size(-1), rows = p.numel() / C;
  int64_t row = 0;
  for (QuantizedRows& s : segments) {
    const kernels::QuantType q = quant_type(s.type);
    check(C % kernels::quant_format(q).block == 0, "'{}': rows of {} values cannot be {} blocks of {}", p.name, C,
          weight_type_name(s.type), kernels::quant_format(q).block);
    check(s.data != nullptr && s.bytes == s.rows * kernels::quant_row_bytes(q, C),
          "'{}': {} rows of {} as {} take {} bytes, got {}", p.name, s.rows, C, weight_type_name(s.type),
          s.rows * kernels::quant_row_bytes(q, C), s.bytes);
    s.repacked.clear();
    if (q == kernels::QuantType::Q4_0 && s.rows >= 8) {  // decoding reads eight rows at a time
      s.repacked.resize(static_cast<size_t>(kernels::q4_0x8_bytes(s.rows, C)));
      kernels::repack_q4_0x8(s.repacked.data(), s.data, s.rows, C);
    } else if (q == kernels::QuantType::Q8_0 && s.rows >= 8) {
      s.repacked.resize(static_cast<size_t>(kernels::q8_0x8_bytes(s.rows, C)));
      kernels::repack_q8_0x8(s.repacked.data(), s.data, s.rows, C);
    }
    row += s.rows;
  }
  check(row == rows, "'{}': quantized segments hold {} rows, the matrix has {}", p.name, row, rows);
  p.packed.clear();
  p.storage = segments.empty() ? WeightType::F32 : segments.front().type;
  p.quantized = std::move(segments);
  if (p.value.data() != nullptr) dequantize_values(p, p.value.data());  // values, where it has them, are the blocks'
}

namespace {

// Where each row of a weight held as stored is (its quantized segments' blocks, or its packed 16-bit values), and
// of what type.
struct StoredRow {
  WeightType type;
  const uint8_t* data;
};

void stored_rows_of(const Parameter& w, int64_t C, std::vector<StoredRow>& out) {
  out.clear();
  if (w.quantized.empty()) {  // packed in 16 bits
    const auto* bits = reinterpret_cast<const uint8_t*>(w.packed.data());
    const int64_t rows = static_cast<int64_t>(w.packed.size()) / C;
    for (int64_t r = 0; r < rows; ++r) out.push_back({w.storage, bits + r * C * 2});
    return;
  }
  for (const QuantizedRows& s : w.quantized) {
    const int64_t row_bytes = kernels::quant_row_bytes(quant_type(s.type), C);
    for (int64_t r = 0; r < s.rows; ++r) out.push_back({s.type, s.data + r * row_bytes});
  }
}

// A row's C values in fp32: exactly the 16-bit values, or the blocks' values as ggml computes them.
void widen_row(const StoredRow& row, float* out, int64_t C) {
  const auto* bits = reinterpret_cast<const uint16_t*>(row.data);
  if (row.type == WeightType::BF16) return kernels::bf16_to_float(out, bits, C);
  if (row.type == WeightType::F16) return kernels::half_to_float(out, bits, C);
  kernels::dequantize_row(quant_type(row.type), out, row.data, C);
}

}  // namespace

bool held_as_stored(const Parameter& p) { return !p.quantized.empty() || !p.packed.empty(); }

void stored_row(const Parameter& p, int64_t r, float* out) {
  const int64_t C = p.value.size(-1);
  if (p.quantized.empty()) {
    check(!p.packed.empty() && (r + 1) * C <= static_cast<int64_t>(p.packed.size()),
          "'{}': row {} is past its stored rows", p.name, r);
    return widen_row({p.storage, reinterpret_cast<const uint8_t*>(p.packed.data() + r * C)}, out, C);
  }
  for (const QuantizedRows& s : p.quantized) {
    if (r < s.rows) return widen_row({s.type, s.data + r * kernels::quant_row_bytes(quant_type(s.type), C)}, out, C);
    r -= s.rows;
  }
  throw Error(fmt::format("'{}': row {} is past its quantized rows", p.name, r));
}

void dequantize_values(const Parameter& p, float* out) {
  const int64_t C = p.value.size(-1);
  std::vector<StoredRow> rows;
  stored_rows_of(p, C, rows);
  kernels::parallel_for(static_cast<int64_t>(rows.size()), kernels::row_grain(C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) widen_row(rows[r], out + r * C, C);
  });
}

bool quantize_parameter(Parameter& p, WeightType type, const float* importance) {
  const std::pair<int64_t, WeightType> whole[] = {{p.numel() / p.value.size(-1), type}};
  return quantize_parameter(p, whole, importance);
}

bool quantize_parameter(Parameter& p, std::span<const std::pair<int64_t, WeightType>> plan, const float* importance) {
  const int64_t C = p.value.size(-1);
  check(p.has_values(), "'{}': quantizing needs its float values (Model::ensure_values)", p.name);
  for (const auto& [rows, type] : plan)
    if (C % kernels::quant_format(quant_type(type)).block != 0) return false;
  std::vector<QuantizedRows> segments;
  int64_t row = 0;
  for (const auto& [rows, type] : plan) {
    const kernels::QuantType q = quant_type(type);
    const int64_t row_bytes = kernels::quant_row_bytes(q, C);
    std::vector<uint8_t> blocks(static_cast<size_t>(rows * row_bytes));
    const float* x = p.value.data() + row * C;
    kernels::parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) kernels::quantize_row(q, blocks.data() + r * row_bytes, x + r * C, C, importance);
    });
    if (!segments.empty() && segments.back().type == type) {  // one segment for consecutive rows of one type
      std::vector<uint8_t> joined(segments.back().data, segments.back().data + segments.back().bytes);
      joined.insert(joined.end(), blocks.begin(), blocks.end());
      segments.back() = QuantizedRows::owning(segments.back().rows + rows, type, std::move(joined));
    } else {
      segments.push_back(QuantizedRows::owning(rows, type, std::move(blocks)));
    }
    row += rows;
  }
  set_quantized(p, std::move(segments));  // checks that the rows add up
  return true;
}

namespace {

InputStatistics* recording = nullptr;  // RecordInputs's statistics, while one is alive
std::mutex recording_mutex;

thread_local bool per_row_matmuls = false;  // a PerRowMatmuls is alive on this thread
thread_local std::span<const uint64_t> row_adapters;  // a SelectAdapters's masks, while one is alive
thread_local std::span<const double* const> row_adapter_scales;  // and its multipliers, if it has them
// Whether the per-row (decoding) kernels take a matmul of N rows: few rows, or a PerRowMatmuls alive. Forward
// and backward ask alike, so that a backward runs the kernel family its forward ran.
bool per_row(int64_t N) { return N <= kernels::kGemvRows || per_row_matmuls; }
// out (N, s.rows) = inp · the segment's rowsᵀ + bias on the int8 kernels: the repacked kernel where the segment
// has its rows repacked, the plain one (input rows quantized to int8 blocks) otherwise.
void quantized_rows_forward(const QuantizedRows& s, float* out, const float* inp, const float* bias, int64_t N, int64_t C) {
  if (!s.repacked.empty())
    return kernels::matmul_forward_x8(quant_type(s.type), out, inp, s.repacked.data(), s.data, bias, N, C, s.rows);
  kernels::matmul_forward_quant_rows(quant_type(s.type), out, inp, s.data, bias, N, C, s.rows);
}

// The rows up to which a quantized weight multiplies on the int8 kernels rather than dequantizing its blocks for a
// GEMM (stored_prompt_forward), a pass over the whole matrix that pays back only over many rows. Measured on
// GPT-2-124M (Zen 4, 2 threads, a whole forward of a prompt; the other instruction sets forced with ATTEND_ISA
// and ONEDNN_MAX_CPU_ISA, 2026-11-26):
//   - Q4_0 and Q8_0 rows repacked eight at a time: the int8 kernel up to 128 rows (27 against 57 ms at 32), and
//     at any length on CPUs without bf16 and for Q4_0 on CPUs with VNNI, where it outruns dequantizing for the
//     bf16 GEMM (pp512: Q4_0 1,860-2,007 against 1,435-1,739 tokens/s; Q8_0 the other way, 1,531-1,538 against
//     1,708-1,734);
//   - the K types (which take four input rows a pass over each block): where the bf16 GEMM is in use up to 32 rows
//     (Q4_K_M, 30 against 30 ms at 32 rows, 59 against 44 at 64); without it, on AMD's AVX-512 cores at any length
//     (Zen 4, AVX-512 forced without BF16: Q4_K_M at 64 rows 59-69 against 124-179 ms, at 512 517-523 against
//     619-632 ms on the fp32 GEMM), on Intel's (an Emerald Rapids Xeon, which has AVX-512 BF16 but no AMX) up to
//     128 rows: its sgemm runs two 512-bit FMAs a cycle where the int8 kernels' 512-bit integer work shares two
//     ports (Q4_K_M pp512 556-572 tokens/s on the int8 kernels against 910-935, pp64 538-655 against 477-499,
//     2026-11-28); on AVX2 up to 256 rows
//     (33 against 44 ms at 32, 286-292 against 320-323 at 256; at 512 the GEMM's 964-982 tokens/s against
//     919-941);
//   - the other types: up to 16 rows.
constexpr int64_t kF16GemvRows = 64;

int64_t int8_rows_limit(const Parameter& weight) {
  const bool bf16 = kernels::bf16_kernel_in_use();
  const kernels::Isa isa = kernels::active_isa();
  const bool repacked = std::all_of(weight.quantized.begin(), weight.quantized.end(),
                                    [](const QuantizedRows& s) { return !s.repacked.empty(); });
  constexpr int64_t kAny = std::numeric_limits<int64_t>::max();
  if (repacked) {
    const bool q4_0 = std::all_of(weight.quantized.begin(), weight.quantized.end(),
                                  [](const QuantizedRows& s) { return s.type == WeightType::Q4_0; });
    return !bf16 || (isa == kernels::Isa::Avx512Vnni && q4_0) ? kAny : 128;
  }
  const bool k_types = std::all_of(weight.quantized.begin(), weight.quantized.end(), [](const QuantizedRows& s) {
    return s.type == WeightType::Q4_K || s.type == WeightType::Q5_K || s.type == WeightType::Q6_K;
  });
  if (!k_types || isa == kernels::Isa::Generic) return 16;
  if (bf16) return 32;
  if (isa == kernels::Isa::Avx2) return 256;
  return kernels::cpu_is_intel() ? 128 : kAny;
}

// out (N, OC) = inp · Wᵀ + bias for a W held as stored without float values (quantized blocks, or packed in 16
// bits), N rows at once (a prompt): the rows' values up to 64 MiB at a time into a scratch that one GEMM reads,
// whatever segments the rows come from (a GGUF file's Q, K and V make one GEMM), writing its columns of `out` in
// place. `bf16`: the values rounded to bf16 for the bf16 GEMM (a quantized W where the CPU has bf16 products, at
// twice sgemm's rate, the input rounded as in bf16 training); else fp32 values for sgemm on `inp` as given. The
// values a float matrix would hold, without holding them: widening is one pass over the weight against the GEMM's N.
void stored_prompt_forward(const Parameter& w, float* out, const float* inp, const float* bias, int64_t N, int64_t C,
                           int64_t OC, bool bf16) {
  const uint16_t* inp_bf16 = bf16 ? rounded(0, Precision::BF16, inp, N * C) : nullptr;
  if (bias != nullptr)  // the GEMMs add onto the bias rows
    kernels::parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) std::memcpy(out + n * OC, bias, OC * sizeof(float));
    });
  const float beta = bias != nullptr ? 1.0f : 0.0f;
  thread_local std::vector<StoredRow> rows;
  stored_rows_of(w, C, rows);
  // Pieces of equal rows (a multiple of 16) of at most 64 MiB; for a 16-bit W and a short prompt, 4 MiB, which the
  // GEMM reads back from the cache rather than from memory (Llama-3.2-1B shape in F16, Zen 4, 2 threads: 8 rows
  // 314 against 604 ms, 32 rows 1.84 against 2.16 s; from 128 rows on 64 MiB is faster, 2.9 against 3.4 s, the
  // GEMM packing its input once per piece).
  const int64_t piece_bytes = w.quantized.empty() && N < 64 ? int64_t{4} << 20 : int64_t{64} << 20;
  const int64_t most = std::max<int64_t>(16, piece_bytes / (C * (bf16 ? 2 : 4)));
  const int64_t pieces = (OC + most - 1) / most;
  const int64_t piece = std::min(OC, ((OC + pieces - 1) / pieces + 15) / 16 * 16);
  thread_local std::vector<float> values;
  thread_local std::vector<uint16_t> values_bf16;
  if (bf16) values_bf16.resize(static_cast<size_t>(piece * C)); else values.resize(static_cast<size_t>(piece * C));
  // This thread's scratch, by pointer: inside the parallel region the names are each thread's own.
  float* to_floats = values.data();
  uint16_t* to_bf16 = values_bf16.data();
  const StoredRow* row_at = rows.data();
  for (int64_t r0 = 0; r0 < OC; r0 += piece) {
    const int64_t R = std::min(piece, OC - r0);
    kernels::parallel_for(R, kernels::row_grain(C), [&](int64_t a, int64_t b) {
      std::vector<float> row(bf16 ? static_cast<size_t>(C) : 0);
      for (int64_t r = a; r < b; ++r) {
        const StoredRow& from = row_at[r0 + r];
        if (!bf16) {
          widen_row(from, to_floats + r * C, C);
          continue;
        }
        widen_row(from, row.data(), C);
        kernels::float_to_bf16(to_bf16 + r * C, row.data(), C);
      }
    });
    if (bf16)
      kernels::gemm_half(kernels::Half::BF16, false, true, N, R, C, inp_bf16, C, to_bf16, C, beta, out + r0, OC);
    else
      kernels::gemm<float>(false, true, N, R, C, 1.0f, inp, C, to_floats, C, beta, out + r0, OC);
  }
}

// dinp (N, C) += dout (N, OC) · W for a weight held as stored without float values: its rows' values, widened to
// fp32 a piece of at most 64 MiB at a time, then one GEMM per piece.
void stored_input_backward(const Parameter& w, float* dinp, const float* dout, int64_t N, int64_t C, int64_t OC) {
  std::vector<StoredRow> rows;  // a local: the parallel region below reads it from every thread
  stored_rows_of(w, C, rows);
  check(static_cast<int64_t>(rows.size()) == OC, "linear '{}': {} stored rows, expected {}", w.name, rows.size(), OC);
  const int64_t piece = std::min<int64_t>(OC, std::max<int64_t>(16, (int64_t{64} << 20) / (C * 4)));
  thread_local std::vector<float> values;
  values.resize(static_cast<size_t>(piece * C));
  float* to = values.data();
  for (int64_t r0 = 0; r0 < OC; r0 += piece) {
    const int64_t R = std::min(piece, OC - r0);
    kernels::parallel_for(R, kernels::row_grain(C), [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) widen_row(rows[r0 + r], to + r * C, C);
    });
    kernels::gemm<float>(false, false, N, C, R, 1.0f, dout + r0, OC, to, C, 1.0f, dinp, C);
  }
}

void record_inputs(const Parameter& weight, const float* inp, int64_t N, int64_t C) {
  const std::lock_guard lock(recording_mutex);
  InputStatistics::Entry& e = recording->by_weight[weight.name];
  if (e.sum_squares.empty()) e.sum_squares.assign(static_cast<size_t>(C), 0.0);
  check(static_cast<int64_t>(e.sum_squares.size()) == C, "input statistics of '{}': rows of {} values, earlier {}",
        weight.name, C, e.sum_squares.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < C; ++j) e.sum_squares[j] += static_cast<double>(inp[n * C + j]) * inp[n * C + j];
  e.rows += N;
}

}  // namespace

}  // namespace attend::nn

namespace attend {

std::vector<float> InputStatistics::mean_squares(std::string_view name) const {
  const auto it = by_weight.find(name);
  if (it == by_weight.end() || it->second.rows == 0) return {};
  std::vector<float> m(it->second.sum_squares.size());
  for (size_t j = 0; j < m.size(); ++j) m[j] = static_cast<float>(it->second.sum_squares[j] / it->second.rows);
  return m;
}

RecordInputs::RecordInputs(InputStatistics& stats) {
  check(nn::recording == nullptr, "input statistics: another RecordInputs is already recording");
  nn::recording = &stats;
}

RecordInputs::~RecordInputs() { nn::recording = nullptr; }

}  // namespace attend

namespace attend::nn {

namespace {
void linear_forward_as_stored(float* out, const float* inp, const Parameter& weight, const float* bias, int64_t N,
                              int64_t C, int64_t OC, Precision precision, std::vector<uint16_t>* w_rounded);
}  // namespace

void linear_forward(float* out, const float* inp, const Parameter& weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, Precision precision, std::vector<uint16_t>* w_rounded, const LoraStream* drop) {
  linear_forward_as_stored(out, inp, weight, bias, N, C, OC, precision, w_rounded);
  if (weight.lora.empty()) return;
  check(row_adapters.empty() || static_cast<int64_t>(row_adapters.size()) == N,
        "linear '{}': {} rows, but the adapters were selected for {}", weight.name, N, row_adapters.size());
  check(row_adapter_scales.empty() || row_adapter_scales.size() == row_adapters.size(),
        "linear '{}': adapter multipliers for {} rows, masks for {}", weight.name, row_adapter_scales.size(),
        row_adapters.size());
  lora_forward(out, inp, weight, N, C, OC, row_adapters.empty() ? nullptr : row_adapters.data(), per_row_matmuls, drop,
               row_adapter_scales.empty() ? nullptr : row_adapter_scales.data());
}

namespace {
void linear_forward_as_stored(float* out, const float* inp, const Parameter& weight, const float* bias, int64_t N,
                              int64_t C, int64_t OC, Precision precision, std::vector<uint16_t>* w_rounded) {
  if (recording != nullptr) record_inputs(weight, inp, N, C);
  precision = precision_for(weight, precision);
  // A quantized weight: the int8 kernels on its blocks for decoding and for prompts up to int8_rows_limit's rows;
  // longer prompts dequantize the blocks piece by piece for a GEMM.
  if (!weight.quantized.empty()) {
    check(precision == Precision::F32, "linear '{}': a quantized weight runs in fp32 (mixed precision is training's)",
          weight.name);
    if (N > int8_rows_limit(weight) && !per_row_matmuls)
      return stored_prompt_forward(weight, out, inp, bias, N, C, OC, kernels::bf16_kernel_in_use());
    if (weight.quantized.size() == 1) return quantized_rows_forward(weight.quantized[0], out, inp, bias, N, C);
    // Segments of rows (a GGUF file's Q, K and V): each segment's channels, then interleaved.
    thread_local std::vector<float> part;
    int64_t o0 = 0;
    for (const QuantizedRows& s : weight.quantized) {
      const float* b = bias ? bias + o0 : nullptr;
      if (N == 1) {
        quantized_rows_forward(s, out + o0, inp, b, N, C);
      } else {
        part.resize(static_cast<size_t>(N * s.rows));
        quantized_rows_forward(s, part.data(), inp, b, N, C);
        for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * OC + o0, part.data() + n * s.rows, s.rows * sizeof(float));
      }
      o0 += s.rows;
    }
    return;
  }
  if (precision != Precision::F32) {
    check(w_rounded != nullptr, "linear '{}': mixed precision keeps the rounded weight for backward", weight.name);
    w_rounded->resize(static_cast<size_t>(weight.numel()));
    kernels::round_to_half(half_of(precision), w_rounded->data(), weight.value.data(), weight.numel());
    kernels::matmul_forward_half(half_of(precision), out, rounded(0, precision, inp, N * C), w_rounded->data(), bias,
                                 N, C, OC);
    return;
  }
  const bool rows = per_row(N);
  switch (weight.storage) {
    case WeightType::F32:
      if (rows) return kernels::matmul_forward_rows(out, inp, weight.value.data(), bias, N, C, OC);
      return kernels::matmul_forward(out, inp, weight.value.data(), bias, N, C, OC);
    case WeightType::Q8_0: case WeightType::Q4_0: case WeightType::Q4_1: case WeightType::Q5_0: case WeightType::Q5_1:
    case WeightType::Q4_K: case WeightType::Q5_K: case WeightType::Q6_K:
      throw Error(fmt::format("linear '{}': stored as {} without its blocks", weight.name, weight_type_name(weight.storage)));
    case WeightType::BF16:
      if (rows) return kernels::matmul_forward_bf16(out, inp, weight.packed.data(), bias, N, C, OC);
      // A prompt: bf16 products at up to twice sgemm's rate, inputs rounded as in bf16 training.
      if (kernels::bf16_kernel_in_use())
        return kernels::matmul_forward_half(kernels::Half::BF16, out, rounded(0, Precision::BF16, inp, N * C),
                                            weight.packed.data(), bias, N, C, OC);
      [[fallthrough]];  // no bf16 dot products on this CPU (AVX2): the same numbers through sgemm, below
    case WeightType::F16:
      // fp16: short prompts too on the gemv (several rows a pass over each weight row), which outruns widening the
      // whole matrix for sgemm up to about kF16GemvRows rows.
      if (weight.storage == WeightType::F16 && (rows || N <= kF16GemvRows))
        return kernels::matmul_forward_f16(out, inp, weight.packed.data(), bias, N, C, OC);
      // sgemm on the weight's fp32 values, which are its packed 16-bit values exactly. bf16: the input rounded as
      // the bf16 GEMM rounds it, so that a CPU without one computes the same numbers (without widening the weight
      // at every call, which made bf16 prompts slower than fp32 ones on CPUs without AVX-512 BF16). fp16: no CPU
      // here runs an fp16 GEMM, so the input stays fp32, as in decoding's gemv: rounding it to fp16 would only
      // add error, and turn activations past 65504 (Gemma's can be) into infinities.
      // A matrix held as stored alone (Model::hold_as_stored) widens a piece of its rows at a time.
      const float* x = weight.storage == WeightType::F16 ? inp : rounded_floats(Precision::BF16, inp, N * C);
      if (!weight.has_values()) return stored_prompt_forward(weight, out, x, bias, N, C, OC, false);
      return kernels::matmul_forward(out, x, weight.value.data(), bias, N, C, OC);
  }
}
}  // namespace

bool rows_take_per_row_kernels(const Parameter& weight, int64_t rows) {
  if (!weight.lora.empty() || precision_for(weight, Precision::F32) != Precision::F32) return false;
  if (!weight.quantized.empty()) return rows <= int8_rows_limit(weight);
  if (weight.storage == WeightType::F16) return rows <= kF16GemvRows;
  return rows <= kernels::kGemvRows;
}

SelectAdapters::SelectAdapters(std::span<const uint64_t> row_masks, std::span<const double* const> row_scales)
    : outer_(row_adapters), outer_scales_(row_adapter_scales) {
  check(row_scales.empty() || row_scales.size() == row_masks.size(),
        "SelectAdapters: multipliers for {} rows, masks for {}", row_scales.size(), row_masks.size());
  row_adapters = row_masks;
  row_adapter_scales = row_scales;
}
SelectAdapters::~SelectAdapters() {
  row_adapters = outer_;
  row_adapter_scales = outer_scales_;
}

PerRowMatmuls::PerRowMatmuls() : outer_(!per_row_matmuls) { per_row_matmuls = true; }
PerRowMatmuls::~PerRowMatmuls() {
  if (outer_) per_row_matmuls = false;
}

// ---- Linear ----------------------------------------------------------------------------------------

Linear::Linear(const std::string& name, int64_t in, int64_t out, bool has_bias, Role role, Role bias_role)
    : weight(name + ".weight", {out, in}, role) {
  if (has_bias) bias = Parameter(name + ".bias", {out}, bias_role);
}

Tensor Linear::forward(const Tensor& x, Precision precision, Saved* saved, bool training, Rng* rng) const {
  const int64_t N = x.numel() / in();
  Tensor y = Tensor::uninitialized({N, out()});  // the matmul writes every element
  const float* b = bias.numel() ? bias.value.data() : nullptr;
  precision = precision_for(weight, precision);
  const LoraStream drop = weight.lora.empty() ? LoraStream{} : lora_dropout_stream(weight, N, training, rng);
  if (precision == Precision::F32) {
    if (saved != nullptr) *saved = Saved{N, precision, x.clone(), {}, {}, drop};
    linear_forward(y.data(), x.data(), weight, b, N, in(), out(), Precision::F32, nullptr, &drop);
    return y;
  }
  // Mixed precision keeps the rounded input for backward: half the bytes of a copy, and no second rounding.
  check(weight.has_values(), "linear '{}': held as {} only; training needs its float values "
        "(Model::ensure_values)", weight.name, weight_type_name(weight.storage));
  check(saved != nullptr, "linear '{}': mixed precision needs a forward that saves for backward", weight.name);
  saved->rows = N, saved->precision = precision, saved->x = Tensor(), saved->lora_drop = drop;
  saved->x_rounded.resize(static_cast<size_t>(N * in()));
  kernels::round_to_half(half_of(precision), saved->x_rounded.data(), x.data(), N * in());
  saved->w_rounded.resize(static_cast<size_t>(weight.numel()));
  kernels::round_to_half(half_of(precision), saved->w_rounded.data(), weight.value.data(), weight.numel());
  kernels::matmul_forward_half(half_of(precision), y.data(), saved->x_rounded.data(), saved->w_rounded.data(), b, N,
                               in(), out());
  if (!weight.lora.empty()) {  // adapters stay fp32, on the fp32 input (kept for their backward)
    saved->x = x.clone();
    lora_forward(y.data(), x.data(), weight, N, in(), out(), nullptr, false, &drop);
  }
  return y;
}

void linear_backward(float* dinp, Parameter& weight, float* dbias, const float* dout, const float* inp, int64_t N,
                     int64_t C, int64_t OC, Precision precision, const std::vector<uint16_t>* w_rounded,
                     const LoraStream* drop) {
  precision = precision_for(weight, precision);
  if (!weight.lora.empty()) lora_backward(dinp, weight, dout, inp, N, C, OC, drop);
  check(weight.has_values() || weight.frozen, "linear '{}': held as {} only; training it needs its float values "
        "(Model::ensure_values)", weight.name, weight_type_name(weight.storage));
  // A frozen base held in bf16 (train.frozen_weights=bf16), whose forward ran the bf16 GEMM on its packed values
  // (linear_forward_as_stored): its input gradient on the same GEMM, dout rounded to bf16 as in bf16 training
  // (QLoRA's bf16 compute), at up to twice sgemm's rate. No weight gradient exists to need fp32.
  if (precision == Precision::F32 && weight.frozen && weight.storage == WeightType::BF16 && !per_row(N) &&
      kernels::bf16_kernel_in_use())
    return kernels::matmul_backward_half(kernels::Half::BF16, dinp, nullptr, dbias, dout,
                                         rounded(0, Precision::BF16, dout, N * OC), nullptr, weight.packed.data(), N,
                                         C, OC);
  if (!weight.has_values()) {  // QLoRA: a frozen weight held as stored alone passes the gradient on
    if (dinp != nullptr) stored_input_backward(weight, dinp, dout, N, C, OC);
    return kernels::matmul_backward<float>(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, C, OC);  // Σ dout
  }
  if (precision == Precision::F32)
    return kernels::matmul_backward(dinp, weight.grad.data(), dbias, dout, inp, weight.value.data(), N, C, OC);
  check(w_rounded != nullptr && w_rounded->size() == static_cast<size_t>(weight.numel()),
        "linear '{}': backward without its forward's rounded weight", weight.name);
  kernels::matmul_backward_half(half_of(precision), dinp, weight.grad.data(), dbias, dout,
                                rounded(0, precision, dout, N * OC), rounded(1, precision, inp, N * C),
                                w_rounded->data(), N, C, OC);
}

Tensor Linear::backward(const Tensor& dout, const Saved& saved) {
  const int64_t N = saved.rows;
  Tensor dx({N, in()});
  float* dbias = bias.numel() ? bias.grad.data() : nullptr;
  if (saved.precision == Precision::F32) {
    linear_backward(dx.data(), weight, dbias, dout.data(), saved.x.data(), N, in(), out(), Precision::F32, nullptr,
                    &saved.lora_drop);
  } else {
    check(saved.x_rounded.size() == static_cast<size_t>(N * in()), "linear '{}': backward without its forward",
          weight.name);
    if (!weight.lora.empty())
      lora_backward(dx.data(), weight, dout.data(), saved.x.data(), N, in(), out(), &saved.lora_drop);
    kernels::matmul_backward_half(half_of(saved.precision), dx.data(), weight.grad.data(), dbias, dout.data(),
                                  rounded(0, saved.precision, dout.data(), N * out()), saved.x_rounded.data(),
                                  saved.w_rounded.data(), N, in(), out());
  }
  return dx;
}

void Linear::collect(std::vector<Parameter*>& out) {
  out.push_back(&weight);
  lora.collect(weight, out);
  if (bias.numel()) out.push_back(&bias);
}

// ---- Norm ------------------------------------------------------------------------------------------

const float* norm_gain(const Parameter& gain, bool unit_offset, std::vector<float>& scratch) {
  if (!unit_offset) return gain.value.data();
  scratch.resize(static_cast<size_t>(gain.numel()));
  for (size_t i = 0; i < scratch.size(); ++i) scratch[i] = 1.0f + gain.value.data()[i];
  return scratch.data();
}

Norm::Norm(const std::string& name, NormKind kind, int64_t C, double eps, bool unit_offset, Role gain_role,
           Role bias_role)
    : weight(name + ".weight", {C}, gain_role), kind_(kind), eps_(static_cast<float>(eps)), unit_offset_(unit_offset) {
  if (kind == NormKind::LayerNorm) bias = Parameter(name + ".bias", {C}, bias_role);
  if (weight.has_values()) weight.value.fill(unit_offset ? 0.0f : 1.0f);  // a gain of 1 either way (a model's: lay_out)
}

Tensor Norm::forward(const Tensor& x, Saved* saved) const {
  const int64_t C = weight.numel(), N = x.numel() / C;
  Saved scratch;  // evaluation and sessions: the statistics are computed and dropped
  Saved& s = saved != nullptr ? *saved : scratch;
  if (saved != nullptr) s.x = x.clone();
  Tensor y = Tensor::uninitialized({N, C});
  s.rstd = Tensor::uninitialized({N});
  std::vector<float> offset_gain;
  const float* gain = norm_gain(weight, unit_offset_, offset_gain);
  if (kind_ == NormKind::LayerNorm) {
    s.mean = Tensor::uninitialized({N});
    kernels::layernorm_forward(y.data(), s.mean.data(), s.rstd.data(), x.data(), gain, bias.value.data(), N, C, eps_);
  } else {
    kernels::rmsnorm_forward(y.data(), s.rstd.data(), x.data(), gain, N, C, eps_);
  }
  return y;
}

Tensor Norm::backward(const Tensor& dout, const Saved& s) {
  const int64_t C = weight.numel(), N = s.x.numel() / C;
  Tensor dx({N, C});
  std::vector<float> offset_gain;
  const float* gain = norm_gain(weight, unit_offset_, offset_gain);
  if (kind_ == NormKind::LayerNorm)
    kernels::layernorm_backward(dx.data(), weight.grad.data(), bias.grad.data(), dout.data(), s.x.data(), gain,
                                s.mean.data(), s.rstd.data(), N, C);
  else
    kernels::rmsnorm_backward(dx.data(), weight.grad.data(), dout.data(), s.x.data(), gain, s.rstd.data(), N, C);
  return dx;
}

void Norm::collect(std::vector<Parameter*>& out) {
  out.push_back(&weight);
  if (bias.numel()) out.push_back(&bias);
}

// ---- Dropout ---------------------------------------------------------------------------------------

void Dropout::forward(Tensor& x, bool training, Rng* rng, Saved* saved) const {
  const bool active = training && p_ > 0.0f;
  if (saved != nullptr) saved->active = active;
  if (!active) return;
  check(rng != nullptr && saved != nullptr, "dropout: training with dropout {} needs a random stream and a saved state",
        p_);
  saved->seed = rng->seed();
  saved->offset = rng->reserve(static_cast<uint64_t>(x.numel()));
  kernels::dropout_forward(x.data(), x.data(), x.numel(), p_, saved->seed, saved->offset);
}

void Dropout::backward(Tensor& dx, const Saved& saved) const {
  if (!saved.active) return;
  // The gradient of x·m/(1 − p) is dy·m/(1 − p): the forward's multiply by the same regenerated mask, in place.
  kernels::dropout_forward(dx.data(), dx.data(), dx.numel(), p_, saved.seed, saved.offset);
}

// ---- FeedForward -----------------------------------------------------------------------------------

FeedForward::FeedForward(const std::string& name, const ModelConfig& c)
    : kind_(c.activation),
      up_(name + ".up", c.d_model, c.ffn_hidden(), c.bias, Role::FfnIn, Role::FfnBias),
      down_(name + ".down", c.ffn_hidden(), c.d_model, c.bias, Role::FfnOut, Role::FfnBias),
      dropout_(c.ffn_dropout) {
  if (is_gated(kind_)) gate_ = Linear(name + ".gate", c.d_model, c.ffn_hidden(), c.bias, Role::FfnIn, Role::FfnBias);
}

Tensor FeedForward::forward(const Tensor& x, bool training, Rng* rng, Precision precision, Saved* saved) const {
  Saved scratch;  // evaluation and sessions: u and g are dropped after use
  Saved& s = saved != nullptr ? *saved : scratch;
  s.u = up_.forward(x, precision, saved ? &s.up : nullptr, training, rng);
  Tensor h = Tensor::uninitialized(s.u.shape());
  if (is_gated(kind_)) {  // h = f(g) ⊙ u
    s.g = gate_.forward(x, precision, saved ? &s.gate : nullptr, training, rng);
    kernels::gated_forward(activation_of(kind_), h.data(), s.g.data(), s.u.data(), h.numel());
  } else {
    kernels::activation_forward(activation_of(kind_), h.data(), s.u.data(), h.numel());
  }
  dropout_.forward(h, training, rng, saved ? &s.dropout : nullptr);
  return down_.forward(h, precision, saved ? &s.down : nullptr, training, rng);
}

Tensor FeedForward::backward(const Tensor& dout, const Saved& s) {
  Tensor dh = down_.backward(dout, s.down);
  dropout_.backward(dh, s.dropout);
  Tensor du(s.u.shape());
  if (is_gated(kind_)) {
    Tensor dg(s.g.shape());
    kernels::gated_backward(activation_of(kind_), dg.data(), du.data(), dh.data(), s.g.data(), s.u.data(), dh.numel());
    Tensor dx = up_.backward(du, s.up);
    const Tensor dx_gate = gate_.backward(dg, s.gate);
    kernels::residual_forward(dx.data(), dx.data(), dx_gate.data(), dx.numel(), 1.0f);
    return dx;
  }
  kernels::activation_backward(activation_of(kind_), du.data(), dh.data(), s.u.data(), dh.numel());
  return up_.backward(du, s.up);
}

void FeedForward::add_lora(const LoraConfig& config) {
  auto wants = [&](const char* t) { return std::find(config.targets.begin(), config.targets.end(), t) != config.targets.end(); };
  if (wants("up")) up_.lora.add(up_.weight, "", 0, up_.out(), config);
  if (wants("gate") && is_gated(kind_)) gate_.lora.add(gate_.weight, "", 0, gate_.out(), config);
  if (wants("down")) down_.lora.add(down_.weight, "", 0, down_.out(), config);
}

void FeedForward::merge_lora() {
  for (Linear* l : {&up_, &gate_, &down_}) l->lora.merge();
}

void FeedForward::collect(std::vector<Parameter*>& out) {
  up_.collect(out);
  if (is_gated(kind_)) gate_.collect(out);
  down_.collect(out);
}

// ---- Mixture of Experts ----------------------------------------------------------------------------

MixtureOfExperts::MixtureOfExperts(const std::string& name, const ModelConfig& c)
    : name_(name),
      E_(c.n_experts),
      k_(c.moe_top_k),
      capacity_factor_(c.moe_capacity_factor),
      normalize_(c.moe_normalize_weights),
      router_(name + ".router", c.d_model, c.n_experts, /*bias=*/false, Role::Router, Role::FfnBias) {
  for (int64_t e = 0; e < E_; ++e) experts_.emplace_back(fmt::format("{}.experts.{}", name, e), c);
}

Tensor MixtureOfExperts::forward(const Tensor& x, const uint8_t* valid, bool training, Rng* rng,
                                 Precision precision, Saved* saved) const {
  Saved scratch;  // evaluation and sessions: the routing is dropped after use
  Saved& s = saved != nullptr ? *saved : scratch;
  const int64_t C = x.size(-1);
  s.N = x.numel() / C;
  const int64_t N = s.N;
  s.rows.clear();
  for (int64_t n = 0; n < N; ++n)
    if (valid == nullptr || valid[n]) s.rows.push_back(n);
  const auto R = static_cast<int64_t>(s.rows.size());
  Tensor y({N, C});
  s.expert_rows.assign(E_, {});
  s.expert_out.clear();
  s.expert_out.resize(E_);
  s.experts.clear();
  s.experts.resize(saved ? E_ : 0);
  s.fraction.assign(E_, 0.0);
  s.choices.clear();
  s.aux = 0.0;
  s.refused = 0;
  if (R == 0) return y;  // nothing but padding

  // Router: p = softmax(x W_rᵀ) over the valid rows.
  const Tensor logits = router_.forward(gather_rows(x, s.rows), precision, saved ? &s.router : nullptr);
  s.probs = Tensor({R, E_});
  kernels::softmax_forward(s.probs.data(), logits.data(), R, E_, 1.0f);

  // Top-k per row (stable: the lower index wins a tie), then capacity rank by rank.
  s.choices.assign(static_cast<size_t>(R * k_), Choice{});
  std::vector<int64_t> order(E_);
  for (int64_t r = 0; r < R; ++r) {
    const float* p = s.probs.data() + r * E_;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double sum = 0.0;
    for (int64_t j = 0; j < k_; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < k_; ++j)
      s.choices[r * k_ + j] = Choice{r, order[j], -1, normalize_ ? p[order[j]] / sum : double(p[order[j]])};
  }
  const int64_t capacity = capacity_factor_ > 0.0
                               ? static_cast<int64_t>(std::ceil(capacity_factor_ * double(R * k_) / double(E_) - 1e-9))
                               : R * k_;
  for (int64_t j = 0; j < k_; ++j)
    for (int64_t r = 0; r < R; ++r) {
      Choice& ch = s.choices[r * k_ + j];
      s.fraction[ch.expert] += 1.0 / double(R * k_);
      auto& slots = s.expert_rows[ch.expert];
      if (static_cast<int64_t>(slots.size()) < capacity) {
        ch.slot = static_cast<int64_t>(slots.size());
        slots.push_back(r);
      } else {
        ++s.refused;
      }
    }

  // aux = E·Σ_e f_e·P_e
  for (int64_t e = 0; e < E_; ++e) {
    double mean_p = 0.0;
    for (int64_t r = 0; r < R; ++r) mean_p += s.probs[r * E_ + e];
    s.aux += double(E_) * s.fraction[e] * mean_p / double(R);
  }

  // Each expert runs once on its batch of rows; outputs are added back weighted.
  for (int64_t e = 0; e < E_; ++e) {
    if (s.expert_rows[e].empty()) continue;
    std::vector<int64_t> src(s.expert_rows[e].size());
    for (size_t slot = 0; slot < src.size(); ++slot) src[slot] = s.rows[s.expert_rows[e][slot]];
    s.expert_out[e] = experts_[e].forward(gather_rows(x, src), training, rng, precision, saved ? &s.experts[e] : nullptr);
  }
  for (const Choice& ch : s.choices) {
    if (ch.slot < 0) continue;
    const float* o = s.expert_out[ch.expert].data() + ch.slot * C;
    float* dst = y.data() + s.rows[ch.row] * C;
    const auto w = static_cast<float>(ch.weight);
    for (int64_t c = 0; c < C; ++c) dst[c] += w * o[c];
  }
  return y;
}

// With y = Σ_j w_j·o_j:  do_j = w_j·dy,  dw_j = ⟨dy, o_j⟩.
// Renormalised weights w_j = p_j/S: dp_i = dw_i/S − (Σ_j dw_j·p_j)/S² for the k chosen.
// Aux: ∂aux/∂p_{r,e} = E·f_e/R. Then the softmax Jacobian and the router's matmul.
Tensor MixtureOfExperts::backward(const Tensor& dout, double daux, const Saved& s) {
  const int64_t C = dout.size(-1), N = s.N;
  const auto R = static_cast<int64_t>(s.rows.size());
  Tensor dx({N, C});
  if (R == 0) return dx;
  std::vector<double> dweight(s.choices.size(), 0.0);
  std::vector<Tensor> dexpert_out(E_);
  for (int64_t e = 0; e < E_; ++e)
    if (!s.expert_rows[e].empty()) dexpert_out[e] = Tensor(s.expert_out[e].shape());
  for (size_t i = 0; i < s.choices.size(); ++i) {
    const Choice& ch = s.choices[i];
    if (ch.slot < 0) continue;
    const float* dy = dout.data() + s.rows[ch.row] * C;
    const float* o = s.expert_out[ch.expert].data() + ch.slot * C;
    float* dst = dexpert_out[ch.expert].data() + ch.slot * C;
    double dot = 0.0;
    const auto w = static_cast<float>(ch.weight);
    for (int64_t c = 0; c < C; ++c) {
      dst[c] = w * dy[c];
      dot += double(dy[c]) * o[c];
    }
    dweight[i] = dot;
  }
  for (int64_t e = 0; e < E_; ++e) {
    if (s.expert_rows[e].empty()) continue;
    const Tensor dxe = experts_[e].backward(dexpert_out[e], s.experts[e]);
    for (size_t slot = 0; slot < s.expert_rows[e].size(); ++slot) {
      float* dst = dx.data() + s.rows[s.expert_rows[e][slot]] * C;
      const float* src = dxe.data() + static_cast<int64_t>(slot) * C;
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  }

  Tensor dprobs({R, E_});
  for (int64_t r = 0; r < R; ++r) {
    const float* p = s.probs.data() + r * E_;
    float* dp = dprobs.data() + r * E_;
    const Choice* ch = s.choices.data() + r * k_;
    const double* dw = dweight.data() + r * k_;
    if (normalize_) {
      double S = 0.0, dw_p = 0.0;
      for (int64_t j = 0; j < k_; ++j) {
        S += p[ch[j].expert];
        dw_p += dw[j] * p[ch[j].expert];
      }
      for (int64_t j = 0; j < k_; ++j) dp[ch[j].expert] += static_cast<float>(dw[j] / S - dw_p / (S * S));
    } else {
      for (int64_t j = 0; j < k_; ++j) dp[ch[j].expert] += static_cast<float>(dw[j]);
    }
    for (int64_t e = 0; e < E_; ++e) dp[e] += static_cast<float>(daux * double(E_) * s.fraction[e] / double(R));
  }
  Tensor dlogits({R, E_});
  kernels::softmax_backward(dlogits.data(), dprobs.data(), s.probs.data(), R, E_, 1.0f);
  const Tensor dxr = router_.backward(dlogits, s.router);
  for (int64_t r = 0; r < R; ++r) {
    float* dst = dx.data() + s.rows[r] * C;
    for (int64_t c = 0; c < C; ++c) dst[c] += dxr[r * C + c];
  }
  return dx;
}

void MixtureOfExperts::collect(std::vector<Parameter*>& out) {
  router_.collect(out);
  for (auto& e : experts_) e.collect(out);
}

MoEStats MixtureOfExperts::stats(const Saved& saved) const {
  MoEStats s{name_, {}, saved.refused};
  for (const auto& rows : saved.expert_rows) s.tokens_per_expert.push_back(static_cast<int64_t>(rows.size()));
  return s;
}

}  // namespace attend::nn
