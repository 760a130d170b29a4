// int8 activation quantization for wde_cpu_kernels.int8: each row's largest magnitude (one pass), and symmetric
// int8 with one scale (one pass, round half to even and saturate, as torch.quantize_per_tensor does), straight from
// fp32 or bf16 rows: no widened copy, no quantized tensor to unwrap. Rows are split across torch's threads.
// The result is stored as uint8 with zero point 128 (the int8 value + 128, torch's quint8): oneDNN's int8 matmul has
// JIT kernels for u8 activations x s8 weights on every int8 ISA (AVX512-VNNI, AMX), while s8 activations against
// torch's prepacked weights fall to its reference kernel on CPUs without AMX (about 1,000x slower, seen on Zen 5).
// Where the CPU has AMX-INT8 they run its JIT kernels with no zero point to compensate, so the caller may ask for int8.
#include "aten.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "rows_api.h"
#include "rows_avx512.h"

namespace {

using wde::rows::load16;
using wde::rows::store16;
using wde::rows::take16;

// a row's largest magnitude: bf16 compares as its bits with the sign cleared (for finite values the unsigned order
// of those bits is the order of the magnitudes), 32 values a step with no widening; fp32 16 a step
inline float row_absmax(const float* row, int64_t cols) {
  __m512 m = _mm512_setzero_ps();
  for (int64_t c = 0; c < cols; c += 16) {
    m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(take16(c, cols), row + c)));
  }
  return _mm512_reduce_max_ps(m);
}
inline float row_absmax(const c10::BFloat16* row, int64_t cols) {
  const __m512i magnitude = _mm512_set1_epi16(0x7FFF);
  __m512i m = _mm512_setzero_si512();
  for (int64_t c = 0; c < cols; c += 32) {
    const __mmask32 take = cols - c >= 32 ? ~__mmask32(0) : __mmask32((1u << (cols - c)) - 1);
    m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_maskz_loadu_epi16(take, row + c), magnitude));
  }
  const __m256i half = _mm256_max_epu16(_mm512_castsi512_si256(m), _mm512_extracti64x4_epi64(m, 1));
  alignas(32) uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), half);
  const uint16_t top = *std::max_element(lanes, lanes + 16);
  return static_cast<float>(c10::BFloat16(top, c10::BFloat16::from_bits()));
}

template <typename T>
void absmax_rows(const T* x, int64_t rows, int64_t cols, int64_t stride, float* out) {
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) out[r] = row_absmax(x + r * stride, cols);
  });
}

// 16 values times inv as int32, rounded half to even (the default MXCSR mode, as torch.quantize_per_tensor), capped
// at 127 (so that +inf saturates up, not to the out-of-range value -2^31)
template <typename T>
inline __m512i scaled16(const T* p, __mmask16 m, __m512 inv) {
  return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_mul_ps(load16(p, m), inv), _mm512_set1_ps(127.f)));
}

// one row: x * inv rounded and saturated to int8, stored as is (`flip` 0: int8) or + 128 as uint8 (`flip` 0x80: the
// top bit flipped). 64 values a step: the int32s are narrowed by two signed-saturating packs (the clamp to
// [-128, 127]), which interleave 128-bit lanes, put back in order by one permute (the single-step vpmovsdb narrowing
// of 16 at a time is a slow instruction on AMD Zen)
template <typename T>
inline void quantize_row(const T* row, int64_t cols, __m512 inv, uint8_t flip, uint8_t* q) {
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(flip));
  const __mmask16 all = 0xFFFF;
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64) {
    const __m512i low = _mm512_packs_epi32(scaled16(row + c, all, inv), scaled16(row + c + 16, all, inv));
    const __m512i high = _mm512_packs_epi32(scaled16(row + c + 32, all, inv), scaled16(row + c + 48, all, inv));
    const __m512i packed = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(low, high));
    _mm512_storeu_si512(q + c, _mm512_xor_si512(packed, offset));
  }
  for (; c < cols; c += 16) {
    const __mmask16 m = take16(c, cols);
    const __m128i narrowed = _mm512_cvtsepi32_epi8(scaled16(row + c, m, inv));
    _mm_mask_storeu_epi8(q + c, m, _mm_xor_si128(narrowed, _mm512_castsi512_si128(offset)));
  }
}

template <typename T>
void quantize(const T* x, int64_t rows, int64_t cols, int64_t stride, float inv_scale, uint8_t flip, uint8_t* out) {
  const __m512 inv = _mm512_set1_ps(inv_scale);
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) quantize_row(x + r * stride, cols, inv, flip, out + r * cols);
  });
}

// each row with its own scale (its largest magnitude / 127): the row is read twice while in cache
template <typename T>
void quantize_per_row(const T* x, int64_t rows, int64_t cols, int64_t stride, uint8_t flip, uint8_t* out,
                      float* scales) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * stride;
      const float m = row_absmax(row, cols);
      scales[r] = std::max(m, 1e-8f) / 127.f;
      quantize_row(row, cols, _mm512_set1_ps(127.f / std::max(m, 1e-8f)), flip, out + r * cols);
    }
  });
}

// y[r, c] = acc[r, c] * scales[r] + bias[c] + residual[r, c], written as T
template <typename T>
void dequantize_per_row(const float* acc, const float* scales, const float* bias, const T* residual, int64_t rows,
                        int64_t cols, T* y) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const __m512 s = _mm512_set1_ps(scales[r]);
      for (int64_t c = 0; c < cols; c += 16) {
        const __mmask16 m = take16(c, cols);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + r * cols + c), s);
        if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + c));
        if (residual != nullptr) v = _mm512_add_ps(v, load16(residual + r * cols + c, m));
        store16(y + r * cols + c, v, m);
      }
    }
  });
}

struct Avx512Rows {  // the per-row work of rows_api.h's functions
  template <typename T>
  static void absmax_rows(const T* x, int64_t rows, int64_t cols, int64_t stride, float* out) {
    ::absmax_rows(x, rows, cols, stride, out);
  }
  template <typename T>
  static void quantize(const T* x, int64_t rows, int64_t cols, int64_t stride, float inv, uint8_t flip, uint8_t* out) {
    ::quantize(x, rows, cols, stride, inv, flip, out);
  }
  template <typename T>
  static void quantize_per_row(const T* x, int64_t rows, int64_t cols, int64_t stride, uint8_t flip, uint8_t* out,
                               float* scales) {
    ::quantize_per_row(x, rows, cols, stride, flip, out, scales);
  }
  template <typename T>
  static void dequantize_per_row(const float* acc, const float* scales, const float* bias, const T* residual,
                                 int64_t rows, int64_t cols, T* y) {
    ::dequantize_per_row(acc, scales, bias, residual, rows, cols, y);
  }
};

}  // namespace

WDE_DEFINE_QUANTIZATION(Avx512Rows)
