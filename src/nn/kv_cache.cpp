#include "nn/kv_cache.h"

#include "core/enum_names.h"
#include "kernels/convert.h"
#include "kernels/parallel.h"

#include <attend/error.h>

#include <algorithm>
#include <cstring>

namespace attend {

namespace {
constexpr EnumName<CacheType> kCacheTypes[] = {{CacheType::F32, "f32"}, {CacheType::F16, "f16"}, {CacheType::Int8, "int8"}};
}  // namespace

const char* cache_type_name(CacheType t) { return enum_name<CacheType>(kCacheTypes, t); }
CacheType parse_cache_type(std::string_view name) { return parse_enum<CacheType>(kCacheTypes, name, "KV cache type"); }

namespace nn {

int64_t KVCache::memory_bytes(const KVCacheConfig& c) {
  const int64_t rows = 2 * c.n_layers * c.batch * c.max_T * c.n_kv_heads;
  switch (c.storage) {
    case CacheType::F32: return rows * c.d_head * 4;
    case CacheType::F16: return rows * c.d_head * 2;
    case CacheType::Int8: return rows * (c.d_head + 4);  // int8 values and one float scale per row
  }
  return 0;
}

KVCache::KVCache(const KVCacheConfig& c) : config_(c) {
  check(c.n_layers > 0 && c.batch > 0 && c.max_T > 0 && c.n_kv_heads > 0 && c.d_head > 0,
        "KV cache: every size must be positive, got n_layers={} batch={} max_T={} n_kv_heads={} d_head={}", c.n_layers,
        c.batch, c.max_T, c.n_kv_heads, c.d_head);
  rows_per_layer_ = c.batch * c.max_T * c.n_kv_heads;
  const int64_t rows = 2 * c.n_layers * rows_per_layer_;
  switch (c.storage) {
    case CacheType::F32: f32_.assign(rows * c.d_head, 0.0f); break;
    case CacheType::F16: f16_.assign(rows * c.d_head, 0); break;
    case CacheType::Int8:
      i8_.assign(rows * c.d_head, 0);
      scales_.assign(rows, 0.0f);
      break;
  }
}

int64_t KVCache::row(int64_t layer, bool value, int64_t b, int64_t pos) const {
  return ((2 * layer + (value ? 1 : 0)) * config_.batch + b) * config_.max_T * config_.n_kv_heads +
         pos * config_.n_kv_heads;
}

void KVCache::write(int64_t layer, int64_t pos, const float* k, const float* v, int64_t T_new) {
  const auto& c = config_;
  check(layer >= 0 && layer < c.n_layers, "KV cache: layer {} out of range [0, {})", layer, c.n_layers);
  check(pos >= 0 && T_new >= 0 && pos + T_new <= c.max_T,
        "KV cache: writing positions [{}, {}) but the cache holds {} positions (max_T); the sequence is longer "
        "than the context the cache was built for",
        pos, pos + T_new, c.max_T);
  const int64_t n_rows = T_new * c.n_kv_heads;  // consecutive rows of one sequence
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int which = 0; which < 2; ++which) {
      const float* src = (which == 0 ? k : v) + b * n_rows * c.d_head;
      const int64_t first = row(layer, which == 1, b, pos);
      switch (c.storage) {
        case CacheType::F32:
          std::memcpy(&f32_[first * c.d_head], src, n_rows * c.d_head * sizeof(float));
          break;
        case CacheType::F16: kernels::float_to_half(&f16_[first * c.d_head], src, n_rows * c.d_head); break;
        case CacheType::Int8:
          kernels::quantize_rows_int8(&i8_[first * c.d_head], &scales_[first], src, n_rows, c.d_head);
          break;
      }
    }
  }
}

const float* KVCache::read(int64_t layer, int64_t length, bool value) {
  const auto& c = config_;
  check(layer >= 0 && layer < c.n_layers, "KV cache: layer {} out of range [0, {})", layer, c.n_layers);
  check(length >= 0 && length <= c.max_T, "KV cache: reading {} positions of a cache of {}", length, c.max_T);
  if (c.storage == CacheType::F32) return &f32_[row(layer, value, 0, 0) * c.d_head];
  std::vector<float>& out = decoded_[value ? 1 : 0];
  out.resize(rows_per_layer_ * c.d_head);
  const int64_t n_rows = length * c.n_kv_heads;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t first = row(layer, value, b, 0);
    float* dst = &out[b * c.max_T * c.n_kv_heads * c.d_head];
    if (c.storage == CacheType::F16) kernels::half_to_float(dst, &f16_[first * c.d_head], n_rows * c.d_head);
    else kernels::dequantize_rows_int8(dst, &i8_[first * c.d_head], &scales_[first], n_rows, c.d_head);
  }
  return out.data();
}

void KVCache::copy_from(const KVCache& other, int64_t length) {
  const auto& c = config_;
  const auto& o = other.config_;
  check(c.n_layers == o.n_layers && c.batch == o.batch && c.max_T == o.max_T && c.n_kv_heads == o.n_kv_heads &&
            c.d_head == o.d_head && c.storage == o.storage,
        "KV cache: copying from a cache of another configuration");
  check(length >= 0 && length <= c.max_T, "KV cache: copying {} positions of a cache of {}", length, c.max_T);
  const int64_t n_rows = length * c.n_kv_heads;  // rows of one sequence that hold data
  auto copy = [&](auto& to, const auto& from, int64_t width) {
    for (int64_t layer = 0; layer < c.n_layers; ++layer)
      for (int which = 0; which < 2; ++which)
        for (int64_t b = 0; b < c.batch; ++b) {
          const int64_t first = row(layer, which == 1, b, 0) * width;
          std::copy_n(&from[first], n_rows * width, &to[first]);
        }
  };
  switch (c.storage) {
    case CacheType::F32: copy(f32_, other.f32_, c.d_head); break;
    case CacheType::F16: copy(f16_, other.f16_, c.d_head); break;
    case CacheType::Int8:
      copy(i8_, other.i8_, c.d_head);
      copy(scales_, other.scales_, 1);
      break;
  }
}

void KVCache::attend(int64_t layer, float* out, const float* q, kernels::AttentionParams<float> p) {
  const auto& c = config_;
  check(layer >= 0 && layer < c.n_layers, "KV cache: layer {} out of range [0, {})", layer, c.n_layers);
  check(p.Tq == 1 && p.B == c.batch && p.n_kv_heads == c.n_kv_heads && p.d_head == c.d_head && p.Tk >= 0 &&
            p.Tk <= c.max_T,
        "KV cache: attend takes one query per sequence over at most {} positions of batch {} × {} heads × {} "
        "channels, got {} queries over {} positions of batch {} × {} × {}",
        c.max_T, c.batch, c.n_kv_heads, c.d_head, p.Tq, p.Tk, p.B, p.n_kv_heads, p.d_head);
  p.kv_capacity = c.max_T;
  workspace_.resize(kernels::decode_attention_workspace_size(p, kernels::num_threads()));
  const int64_t keys = row(layer, false, 0, 0), values = row(layer, true, 0, 0);
  switch (c.storage) {
    case CacheType::F32:
      kernels::decode_attention_forward(out, q, &f32_[keys * c.d_head], &f32_[values * c.d_head], nullptr, nullptr,
                                        p, workspace_.data());
      break;
    case CacheType::F16:
      kernels::decode_attention_forward(out, q, &f16_[keys * c.d_head], &f16_[values * c.d_head], nullptr, nullptr,
                                        p, workspace_.data());
      break;
    case CacheType::Int8:
      kernels::decode_attention_forward(out, q, &i8_[keys * c.d_head], &i8_[values * c.d_head], &scales_[keys],
                                        &scales_[values], p, workspace_.data());
      break;
  }
}

const float* KVCache::keys(int64_t layer, int64_t length) { return read(layer, length, false); }
const float* KVCache::values(int64_t layer, int64_t length) { return read(layer, length, true); }

}  // namespace nn
}  // namespace attend
