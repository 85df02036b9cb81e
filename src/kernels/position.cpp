#include "kernels/position.h"

#include "kernels/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace attend::kernels {

template <typename T>
void sinusoidal_table(T* out, int64_t start, int64_t T_len, int64_t C, double base) {
  parallel_for(T_len, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const double pos = static_cast<double>(start + t);
      for (int64_t c = 0; c < C; ++c) {
        const int64_t two_i = c - (c % 2);
        const double angle = pos / std::pow(base, static_cast<double>(two_i) / static_cast<double>(C));
        out[t * C + c] = static_cast<T>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    }
  });
}

template <typename T>
void add_positions_forward(T* out, const T* inp, const T* table, int64_t B, int64_t T_len, int64_t C) {
  parallel_for(B * T_len, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* pos = table + (r % T_len) * C;
      for (int64_t c = 0; c < C; ++c) out[r * C + c] = inp[r * C + c] + pos[c];
    }
  });
}

template <typename T>
void add_positions_backward(T* dinp, T* dtable, const T* dout, int64_t B, int64_t T_len, int64_t C) {
  const int64_t n = B * T_len * C;
  parallel_for(n, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dinp[i] += dout[i];
  });
  if (dtable == nullptr) return;
  parallel_for(T_len, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) dtable[t * C + c] += dout[(b * T_len + t) * C + c];
  });
}

double rope_frequency(int64_t i, int64_t d_head, const RopeScaling& scaling, int64_t length) {
  const double d = static_cast<double>(d_head);
  double base = scaling.base * scaling.base_scale;
  if (scaling.ntk_factor != 1.0) base *= std::pow(scaling.ntk_factor, d / (d - 2.0));
  if (scaling.dynamic_factor > 0.0 && length > scaling.original_context) {
    const double f = scaling.dynamic_factor;
    base *= std::pow(f * static_cast<double>(length) / static_cast<double>(scaling.original_context) - (f - 1.0),
                     d / (d - 2.0));
  }
  const double theta = std::pow(base, -2.0 * static_cast<double>(i) / d);
  if (scaling.llama3_factor <= 0.0) return theta;
  const double L0 = static_cast<double>(scaling.original_context), wavelength = 2.0 * M_PI / theta;
  const double f = scaling.llama3_factor, low = scaling.llama3_low_freq_factor, high = scaling.llama3_high_freq_factor;
  if (wavelength < L0 / high) return theta;     // high frequencies stay
  if (wavelength > L0 / low) return theta / f;  // low frequencies are stretched by the factor
  const double s = (L0 / wavelength - low) / (high - low);
  return (1.0 - s) * theta / f + s * theta;
}

template <typename T>
void rope_tables(T* cos_table, T* sin_table, int64_t start, int64_t T_len, int64_t d_head,
                 const RopeScaling& scaling) {
  const int64_t half = d_head / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta = rope_frequency(i, d_head, scaling, start + T_len);
    for (int64_t t = 0; t < T_len; ++t) {
      const double angle = static_cast<double>(start + t) * scaling.position_scale * theta;
      cos_table[t * half + i] = static_cast<T>(std::cos(angle));
      sin_table[t * half + i] = static_cast<T>(std::sin(angle));
    }
  }
}

template <typename T>
void rope_forward(T* out, const T* inp, const T* cos_table, const T* sin_table, int64_t B, int64_t T_len,
                  int64_t H, int64_t d_head) {
  const int64_t half = d_head / 2;
  parallel_for(B * T_len, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* c = cos_table + (r % T_len) * half;
      const T* s = sin_table + (r % T_len) * half;
      for (int64_t h = 0; h < H; ++h) {
        const T* x = inp + (r * H + h) * d_head;
        T* y = out + (r * H + h) * d_head;
        for (int64_t i = 0; i < half; ++i) {
          T x0 = x[2 * i], x1 = x[2 * i + 1];
          y[2 * i] = x0 * c[i] - x1 * s[i];
          y[2 * i + 1] = x0 * s[i] + x1 * c[i];
        }
      }
    }
  });
}

template <typename T>
void rope_backward(T* dinp, const T* dout, const T* cos_table, const T* sin_table, int64_t B, int64_t T_len,
                   int64_t H, int64_t d_head) {
  const int64_t half = d_head / 2;
  parallel_for(B * T_len, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* c = cos_table + (r % T_len) * half;
      const T* s = sin_table + (r % T_len) * half;
      for (int64_t h = 0; h < H; ++h) {
        const T* dy = dout + (r * H + h) * d_head;
        T* dx = dinp + (r * H + h) * d_head;
        for (int64_t i = 0; i < half; ++i) {
          T g0 = dy[2 * i], g1 = dy[2 * i + 1];
          dx[2 * i] += g0 * c[i] + g1 * s[i];
          dx[2 * i + 1] += -g0 * s[i] + g1 * c[i];
        }
      }
    }
  });
}

void alibi_slopes(double* slopes, int64_t H) {
  auto power_of_two_slopes = [](int64_t n, int64_t h) { return std::pow(2.0, -8.0 * static_cast<double>(h + 1) / n); };
  int64_t n0 = 1;
  while (n0 * 2 <= H) n0 *= 2;
  for (int64_t h = 0; h < n0 && h < H; ++h) slopes[h] = power_of_two_slopes(n0, h);
  for (int64_t h = n0; h < H; ++h) slopes[h] = power_of_two_slopes(2 * n0, 2 * (h - n0));
}

template <typename T>
void alibi_bias_forward(T* scores, const double* slopes, int64_t H, int64_t Tq, int64_t Tk, int64_t q_offset) {
  parallel_for(H * Tq, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double m = slopes[r / Tq];
      const int64_t i = r % Tq + q_offset;
      for (int64_t j = 0; j < Tk; ++j) scores[r * Tk + j] += static_cast<T>(-m * static_cast<double>(std::llabs(i - j)));
    }
  });
}

int32_t t5_relative_bucket(int64_t relative_position, bool bidirectional, int32_t num_buckets,
                           int32_t max_distance) {
  int32_t bucket = 0;
  int64_t n;
  if (bidirectional) {
    num_buckets /= 2;
    if (relative_position > 0) bucket += num_buckets;  // keys after the query use the upper half
    n = std::llabs(relative_position);
  } else {
    n = std::max<int64_t>(-relative_position, 0);  // only the past: the future all maps to bucket 0
  }
  const int32_t max_exact = num_buckets / 2;
  if (n < max_exact) return bucket + static_cast<int32_t>(n);
  // Computed in float, as Hugging Face's reference does, so bucket boundaries agree exactly.
  float scaled = std::log(static_cast<float>(n) / static_cast<float>(max_exact)) /
                 static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact)) *
                 static_cast<float>(num_buckets - max_exact);
  int32_t large = max_exact + static_cast<int32_t>(scaled);
  return bucket + std::min(large, num_buckets - 1);
}

template <typename T>
void t5_bias_forward(T* scores, const T* table, int64_t H, int64_t Tq, int64_t Tk, int64_t q_offset,
                     bool bidirectional, int32_t num_buckets, int32_t max_distance) {
  parallel_for(Tq, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = 0; j < Tk; ++j) {
        int32_t b = t5_relative_bucket(j - (i + q_offset), bidirectional, num_buckets, max_distance);
        for (int64_t h = 0; h < H; ++h) scores[(h * Tq + i) * Tk + j] += table[b * H + h];
      }
    }
  });
}

template <typename T>
void t5_bias_backward(T* dtable, const T* dscores, int64_t H, int64_t Tq, int64_t Tk, int64_t q_offset,
                      bool bidirectional, int32_t num_buckets, int32_t max_distance) {
  // Each thread owns a range of heads: the scatter into dtable never races.
  parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t i = 0; i < Tq; ++i) {
      for (int64_t j = 0; j < Tk; ++j) {
        int32_t b = t5_relative_bucket(j - (i + q_offset), bidirectional, num_buckets, max_distance);
        for (int64_t h = h0; h < h1; ++h) dtable[b * H + h] += dscores[(h * Tq + i) * Tk + j];
      }
    }
  });
}

#define ATTEND_INSTANTIATE(T)                                                                                   \
  template void sinusoidal_table<T>(T*, int64_t, int64_t, int64_t, double);                                     \
  template void add_positions_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t);                    \
  template void add_positions_backward<T>(T*, T*, const T*, int64_t, int64_t, int64_t);                         \
  template void rope_tables<T>(T*, T*, int64_t, int64_t, int64_t, const RopeScaling&);                          \
  template void rope_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t);          \
  template void rope_backward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t);         \
  template void alibi_bias_forward<T>(T*, const double*, int64_t, int64_t, int64_t, int64_t);                   \
  template void t5_bias_forward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, bool, int32_t, int32_t);   \
  template void t5_bias_backward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, bool, int32_t, int32_t);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels
