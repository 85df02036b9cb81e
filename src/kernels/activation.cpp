#include "kernels/activation.h"

#include "kernels/parallel.h"
#include "kernels/vec_math.h"

#include <numbers>
#include <type_traits>

namespace attend {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
    case Activation::SiLU: return "silu";
  }
  return "?";
}

}  // namespace attend

namespace attend::kernels {
namespace {

constexpr int64_t kGrain = 1 << 14;
constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kGeluCubic = 0.044715;

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + vec::exp(-x));
}

template <Activation A, typename T>
T forward_one(T x) {
  if constexpr (A == Activation::ReLU) return x > T(0) ? x : T(0);
  if constexpr (A == Activation::GELU) return T(0.5) * x * (T(1) + vec::erf(x * T(std::numbers::sqrt2 / 2)));
  if constexpr (A == Activation::GELUTanh)
    return T(0.5) * x * (T(1) + vec::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x)));
  if constexpr (A == Activation::SiLU) return x * sigmoid(x);
}

template <Activation A, typename T>
T derivative_one(T x) {
  if constexpr (A == Activation::ReLU) return x > T(0) ? T(1) : T(0);
  if constexpr (A == Activation::GELU) {
    T cdf = T(0.5) * (T(1) + vec::erf(x * T(std::numbers::sqrt2 / 2)));
    T pdf = vec::exp(T(-0.5) * x * x) * T(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    return cdf + x * pdf;
  }
  if constexpr (A == Activation::GELUTanh) {
    T t = vec::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
  }
  if constexpr (A == Activation::SiLU) {
    T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
  }
}

// Calls fn with the activation as a compile-time constant, so each kind gets its own SIMD loop.
template <typename F>
void dispatch(Activation a, F&& fn) {
  switch (a) {
    case Activation::ReLU: return fn(std::integral_constant<Activation, Activation::ReLU>{});
    case Activation::GELU: return fn(std::integral_constant<Activation, Activation::GELU>{});
    case Activation::GELUTanh: return fn(std::integral_constant<Activation, Activation::GELUTanh>{});
    case Activation::SiLU: return fn(std::integral_constant<Activation, Activation::SiLU>{});
  }
}

}  // namespace

template <typename T>
void activation_forward(Activation a, T* out, const T* inp, int64_t n) {
  dispatch(a, [&](auto kind) {
    parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) out[i] = forward_one<decltype(kind)::value>(inp[i]);
    });
  });
}

template <typename T>
void activation_backward(Activation a, T* dinp, const T* dout, const T* inp, int64_t n) {
  dispatch(a, [&](auto kind) {
    parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) dinp[i] += dout[i] * derivative_one<decltype(kind)::value>(inp[i]);
    });
  });
}

template <typename T>
void gated_forward(Activation a, T* out, const T* gate, const T* up, int64_t n) {
  dispatch(a, [&](auto kind) {
    parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) out[i] = forward_one<decltype(kind)::value>(gate[i]) * up[i];
    });
  });
}

template <typename T>
void gated_backward(Activation a, T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  dispatch(a, [&](auto kind) {
    parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        dgate[i] += dout[i] * up[i] * derivative_one<decltype(kind)::value>(gate[i]);
        dup[i] += dout[i] * forward_one<decltype(kind)::value>(gate[i]);
      }
    });
  });
}

#define ATTEND_INSTANTIATE(T)                                                          \
  template void activation_forward<T>(Activation, T*, const T*, int64_t);              \
  template void activation_backward<T>(Activation, T*, const T*, const T*, int64_t);   \
  template void gated_forward<T>(Activation, T*, const T*, const T*, int64_t);        \
  template void gated_backward<T>(Activation, T*, T*, const T*, const T*, const T*, int64_t);
ATTEND_INSTANTIATE(float)
ATTEND_INSTANTIATE(double)
#undef ATTEND_INSTANTIATE

}  // namespace attend::kernels
