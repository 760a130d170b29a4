// What the AVX-512 fp32 and bf16 varlen attention kernels share: block sizes, exp, the softmax over a row of scores
// (the driver and the work items, which every ISA's kernel shares, are in varlen_items.h).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "varlen_items.h"

namespace wde {

constexpr int ROWS = 6;           // query rows per register block
constexpr int KEYS = 64;          // keys per register block (4 vectors of 16)

// Every accumulator of a register block set to 0 (constant bounds, inlined: they stay in registers).
template <int R, int C>
__attribute__((always_inline)) inline void zero(__m512 (&acc)[R][C]) {
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r)
    _Pragma("GCC unroll 16")
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
}

// acc += more, accumulator by accumulator (a block's second set of accumulators folded into the first).
template <int R, int C>
__attribute__((always_inline)) inline void add_into(__m512 (&acc)[R][C], const __m512 (&more)[R][C]) {
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r)
    _Pragma("GCC unroll 16")
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_add_ps(acc[r][c], more[r][c]);
}

// A register block's scores (acc[r][c]: row r, keys j + 16 c ...) stored to s (row r at s + r * width), and each
// row's running max (rowmax) raised by them; of the last vector only the keys before j1 count (`keys` = j1 - j; past
// j1 K^T is zero). Both kernels' scores end with it.
template <int NC>
__attribute__((always_inline)) inline void store_scores_and_max(const __m512 (&acc)[ROWS][NC], float* s, int width,
                                                                int keys, __m512* rowmax) {
  _Pragma("GCC unroll 16")
  for (int r = 0; r < ROWS; ++r)
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(s + r * width + 16 * c, acc[r][c]);
  const __mmask16 tail = static_cast<__mmask16>((1u << std::min(16, keys - 16 * (NC - 1))) - 1u);
  _Pragma("GCC unroll 16")
  for (int r = 0; r < ROWS; ++r) {
    __m512 m = rowmax[r];
    _Pragma("GCC unroll 16")
    for (int c = 0; c + 1 < NC; ++c) m = _mm512_max_ps(m, acc[r][c]);
    rowmax[r] = _mm512_mask_max_ps(m, tail, m, acc[r][NC - 1]);
  }
}

// r[c] becomes column c of the 16 x 16 block of 32-bit elements r (four rounds of shuffles): 16 keys' head dims (the
// fp32 kernel's) or (d, d + 1) pairs (the bf16 kernel's) turned into rows of 16 keys without gathers, which are slow
// on AMD Zen (a gather took 13% of the bf16 kernel) and measured slower than this on a Xeon as well.
inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {  // t[2i], t[2i + 1]: rows 2i, 2i + 1 interleaved within 128-bit lanes
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + m], lane L: rows 4i .. 4i + 3 of column 4L + m
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {  // lanes of columns k, 8 + k (0x88) and 4 + k, 12 + k (0xdd) gathered per 8 rows
      t[8 * i + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0x88);
      t[8 * i + 4 + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0xdd);
    }
  for (int k = 0; k < 8; ++k) {  // and across all 16 rows
    r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xdd);
  }
}

// 2^x for finite x, 0 below -125: Cephes' exp2f polynomial on the fraction (degree 6, relative error 1.7e-7: the
// fp32 kernel's exps; the bf16 kernel's shorter one is in varlen_bf16.h). exp(a) is taken as 2^(a log2 e), the
// log2 e folded into the softmax's scale, so the range reduction is one subtraction (9 instructions, where expf's
// Cody-Waite form took 17). Results that would be subnormal are 0: on Intel cores a subnormal result takes a
// microcode assist.
inline __m512 exp2_finite_ps(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.535336188319500e-4f), f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(normal, p, n);
}

// exp2_finite_ps where x may be -inf (masked keys): clamped at -150 first, so that 2^-inf is 0, not NaN.
inline __m512 exp2_ps(__m512 x) { return exp2_finite_ps(_mm512_max_ps(x, _mm512_set1_ps(-150.0f))); }

constexpr float LOG2E = 1.44269504088896341f;

// The first half of a softmax over R rows of a block's scores over [j0, j1) (row r in s + r * width): scores
// outside each row's keys [lo[r], hi[r]) set to -inf, and m[r] = the row's max times `sc` in every lane. The rows go
// through each step together: their chains are independent, so they overlap instead of waiting on one another.
template <int R>
__attribute__((always_inline)) inline void mask_and_scaled_max(float* s, int width, int j0, int j1, const int* lo,
                                                               const int* hi, __m512 sc, __m512 (&m)[R]) {
  for (int r = 0; r < R; ++r) {
    float* row = s + r * width;
    for (int j = j0; j < lo[r]; ++j) row[j - j0] = -INFINITY;
    for (int j = std::max(j0, hi[r]); j < j1; ++j) row[j - j0] = -INFINITY;
  }
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) m[r] = _mm512_set1_ps(-INFINITY);
  for (int j = 0; j < j1 - j0; j += 16)
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; ++r) m[r] = _mm512_max_ps(m[r], _mm512_loadu_ps(s + r * width + j));
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) m[r] = _mm512_mul_ps(_mm512_set1_ps(_mm512_reduce_max_ps(m[r])), sc);
}

// softmax_rows for R rows that each see every key of [j0, j1), their maxima already taken while the scores were
// made (rowmax): one pass (no masking pass, no max pass); keys past j1 (up to the next 16) get probability 0.
template <int R>
inline void softmax_full_rows(float* s, int width, int j0, int j1, const __m512* rowmax, float scale, float* inv) {
  const int n = j1 - j0, full = n & ~15;
  const __m512 sc = _mm512_set1_ps(scale * LOG2E);
  __m512 m[R], sum[R];
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) {
    m[r] = _mm512_mul_ps(_mm512_set1_ps(_mm512_reduce_max_ps(rowmax[r])), sc);
    sum[r] = _mm512_setzero_ps();
  }
  for (int j = 0; j < full; j += 16)
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; ++r) {
      float* x = s + r * width + j;
      const __m512 e = exp2_finite_ps(_mm512_fmsub_ps(_mm512_loadu_ps(x), sc, m[r]));
      sum[r] = _mm512_add_ps(sum[r], e);
      _mm512_storeu_ps(x, e);
    }
  if (full < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; ++r) {
      float* x = s + r * width + full;
      const __m512 e = _mm512_maskz_mov_ps(tail, exp2_finite_ps(_mm512_fmsub_ps(_mm512_loadu_ps(x), sc, m[r])));
      sum[r] = _mm512_add_ps(sum[r], e);
      _mm512_storeu_ps(x, e);
    }
  }
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) inv[r] = 1.0f / _mm512_reduce_add_ps(sum[r]);
}

// exp(scale * (score - max)) of R rows of a block over [j0, j1) in place (row r in s + r * width),
// zero outside each row's keys [lo[r], hi[r]); sets inv[r] = 1 / sum.
template <int R>
inline void softmax_rows(float* s, int width, int j0, int j1, const int* lo, const int* hi, float scale, float* inv) {
  const int n = j1 - j0;
  const __m512 sc = _mm512_set1_ps(scale * LOG2E);  // exp(a) = 2^(a log2 e)
  __m512 m[R], sum[R];
  mask_and_scaled_max<R>(s, width, j0, j1, lo, hi, sc, m);
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) sum[r] = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16)
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; ++r) {
      float* x = s + r * width + j;
      const __m512 e = exp2_ps(_mm512_fmsub_ps(_mm512_loadu_ps(x), sc, m[r]));
      sum[r] = _mm512_add_ps(sum[r], e);
      _mm512_storeu_ps(x, e);
    }
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) inv[r] = 1.0f / _mm512_reduce_add_ps(sum[r]);
}

}  // namespace wde
