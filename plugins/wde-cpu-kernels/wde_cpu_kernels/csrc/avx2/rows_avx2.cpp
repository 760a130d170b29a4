// The row kernels of quantize.cpp and layer_norm.cpp in 8-lane AVX2 (the same results: round half to even, saturation
// at 127 and -128, fp32 sums), for the module built for CPUs without AVX-512 (setup.py: wde_cpu_kernels._varlen_avx2).
// Rows are split across torch's threads; the last cols % 8 values of a row are masked.
#include "aten.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "rows_api.h"
#include "rows_avx2.h"

namespace {

using namespace wde::avx2;

// 8 values of a row (the first n where n < 8), as fp32
template <typename T>
inline __m256 take8(const T* p, int64_t n) { return n >= 8 ? load8(p) : load8(p, n); }
template <typename T>
inline void put8(T* p, __m256 v, int64_t n) { n >= 8 ? store8(p, v) : store8(p, v, n); }

template <typename T>
inline float row_absmax(const T* row, int64_t cols) {
  __m256 m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    m0 = _mm256_max_ps(m0, abs8(load8(row + c)));
    m1 = _mm256_max_ps(m1, abs8(load8(row + c + 8)));
  }
  for (; c < cols; c += 8) m0 = _mm256_max_ps(m0, abs8(take8(row + c, cols - c)));
  return reduce_max(_mm256_max_ps(m0, m1));
}

// 8 values times inv as int32, rounded half to even (the default MXCSR mode), capped at 127 (+inf saturates up)
template <typename T>
inline __m256i scaled8(const T* p, int64_t n, __m256 inv) {
  return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(take8(p, n), inv), _mm256_set1_ps(127.f)));
}

// one row: x * inv rounded and saturated to int8 (+ 128 as uint8 where `flip` is 0x80), 32 values a step: two
// signed-saturating packs (the clamp to [-128, 127]) interleave 128-bit lanes, put back in order by one permute
template <typename T>
inline void quantize_row(const T* row, int64_t cols, __m256 inv, uint8_t flip, uint8_t* q) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(flip));
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    const __m256i low = _mm256_packs_epi32(scaled8(row + c, 8, inv), scaled8(row + c + 8, 8, inv));
    const __m256i high = _mm256_packs_epi32(scaled8(row + c + 16, 8, inv), scaled8(row + c + 24, 8, inv));
    const __m256i packed = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(low, high), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c), _mm256_xor_si256(packed, offset));
  }
  for (; c < cols; c += 8) {
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), scaled8(row + c, cols - c, inv));
    for (int64_t k = 0; k < std::min<int64_t>(8, cols - c); ++k)
      q[c + k] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(lanes[k], -128, 127))) ^ flip;
  }
}

// the sum of f(8 values) over a row: eight independent accumulators over whole steps of 64 columns (as many partial
// sums as the AVX-512 build's four of 16 lanes: fewer measured further from float64 than torch's LayerNorm), added
// up in double; f sees the count of the values that are real, to mask the rest
template <typename T, typename F>
inline double row_sum(const T* row, int64_t cols, F f) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64)
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_add_ps(acc[k], f(load8(row + c + 8 * k), 8));
  for (int k = 0; c < cols; c += 8, k = (k + 1) % 8) acc[k] = _mm256_add_ps(acc[k], f(take8(row + c, cols - c), cols - c));
  double sum = 0.0;
  for (const auto& a : acc) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, a);
    for (float v : lanes) sum += v;
  }
  return sum;
}

struct Avx2Rows {  // the per-row work of rows_api.h's functions
  template <typename T>
  static void absmax_rows(const T* x, int64_t rows, int64_t cols, int64_t stride, float* out) {
    at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) out[r] = row_absmax(x + r * stride, cols);
    });
  }

  template <typename T>
  static void quantize(const T* x, int64_t rows, int64_t cols, int64_t stride, float inv_scale, uint8_t flip,
                       uint8_t* out) {
    const __m256 inv = _mm256_set1_ps(inv_scale);
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) quantize_row(x + r * stride, cols, inv, flip, out + r * cols);
    });
  }

  template <typename T>
  static void quantize_per_row(const T* x, int64_t rows, int64_t cols, int64_t stride, uint8_t flip, uint8_t* out,
                               float* scales) {
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = x + r * stride;
        const float m = std::max(row_absmax(row, cols), 1e-8f);
        scales[r] = m / 127.f;
        quantize_row(row, cols, _mm256_set1_ps(127.f / m), flip, out + r * cols);
      }
    });
  }

  // y[r, c] = acc[r, c] * scales[r] + bias[c] + residual[r, c], written as T
  template <typename T>
  static void dequantize_per_row(const float* acc, const float* scales, const float* bias, const T* residual,
                                 int64_t rows, int64_t cols, T* y) {
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const __m256 s = _mm256_set1_ps(scales[r]);
        for (int64_t c = 0; c < cols; c += 8) {
          const int64_t n = cols - c;
          __m256 v = _mm256_mul_ps(take8(acc + r * cols + c, n), s);
          if (bias != nullptr) v = _mm256_add_ps(v, take8(bias + c, n));
          if (residual != nullptr) v = _mm256_add_ps(v, take8(residual + r * cols + c, n));
          put8(y + r * cols + c, v, n);
        }
      }
    });
  }

  // each row read once from memory and three times from L1: its mean, its variance about the mean, the output
  template <typename T>
  static void layer_norm_rows(const T* x, int64_t rows, int64_t cols, int64_t stride, const float* w, const float* b,
                              float eps, T* y) {
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = x + r * stride;
        const __m256 mu = _mm256_set1_ps(static_cast<float>(row_sum(row, cols, [](__m256 v, int64_t) { return v; }) / cols));
        const double var = row_sum(row, cols, [&](__m256 v, int64_t n) {
          const __m256 d = _mm256_and_ps(_mm256_sub_ps(v, mu), _mm256_castsi256_ps(first_lanes(std::min<int64_t>(n, 8))));
          return _mm256_mul_ps(d, d);
        }) / cols;
        const __m256 rstd = _mm256_set1_ps(static_cast<float>(1.0 / std::sqrt(var + eps)));
        for (int64_t c = 0; c < cols; c += 8) {
          const int64_t n = cols - c;
          const __m256 normed = _mm256_mul_ps(_mm256_sub_ps(take8(row + c, n), mu), rstd);
          put8(y + r * cols + c, _mm256_fmadd_ps(normed, take8(w + c, n), take8(b + c, n)), n);
        }
      }
    });
  }
};

}  // namespace

WDE_DEFINE_QUANTIZATION(Avx2Rows)

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  return wde::rows_api::layer_norm<Avx2Rows>(x, weight, bias, eps);
}
