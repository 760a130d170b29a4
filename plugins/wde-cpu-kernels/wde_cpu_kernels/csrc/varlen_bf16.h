// What the bf16 kernel's AVX512-BF16 and AMX paths share: the per-thread scratch buffers, one (sequence, head)'s
// rows, and the packing of keys and values into the pair layouts both kinds of bf16 dot product take.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "varlen_common.h"

namespace wde::bf16 {

struct Scratch {
  std::vector<float> s, inv;  // scores [rows][width] (fp32 exps after the softmax), 1 / sum per row
  std::vector<uint32_t> kt;   // [D / 2][width]: key j's (d, d + 1) pair
  std::vector<uint32_t> vp;   // [width / 2][D]: (row j, row j + 1) pair of head dim d, j even
  std::vector<uint16_t> p;    // [rows][width] probabilities in bf16
  std::vector<uint16_t> qb;   // [16][D]: the AMX path's block of query rows
  __m512 rowmax[ROWS];        // the AVX512-BF16 path: each register block row's running max of its scores
};

struct Head {
  const uint16_t* q; const uint16_t* k; const uint16_t* v; uint16_t* out;
  int64_t qs, ks, vs, os;
};

inline __m512bh as_bh(__m512i x) {  // the same 512 bits, as bf16 pairs
  __m512bh y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}

inline __m256i bits(__m256bh x) {  // 16 bf16 as plain 256 bits, for storing
  __m256i y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}

// Packs keys [0, last) as (d, d + 1) pairs per key (kt, zero past `last`) and values as (row j, row j + 1) pairs per
// head dim (vp, zero past `last`: the AMX path reads whole chunks of 32 keys).
inline void pack(const Head& h, Scratch& sc, int D, int last, int width) {
  sc.kt.resize(static_cast<size_t>(D / 2) * width);  // only the padding past the packed blocks is zeroed
  const int packed = (last + 15) & ~15;
  for (int d = 0; d < D; d += 2)
    std::fill(sc.kt.data() + static_cast<size_t>(d / 2) * width + packed,
              sc.kt.data() + static_cast<size_t>(d / 2 + 1) * width, 0u);
  for (int j = 0; j < last; ++j)  // the value rows' cache lines requested now, loaded while the keys are transposed
    for (int d = 0; d < D; d += 32) _mm_prefetch(reinterpret_cast<const char*>(h.v + j * h.vs + d), _MM_HINT_T0);
  for (int j = 0; j < last; j += 16) {
    const int keys = std::min(16, last - j);
    for (int d0 = 0; d0 < D; d0 += 32) {  // 16 pairs of head dims per block (D is a multiple of 16)
      const int pairs = std::min(16, (D - d0) / 2);
      const __mmask16 take = static_cast<__mmask16>((1u << pairs) - 1u);
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < keys ? _mm512_maskz_loadu_epi32(take, h.k + (j + i) * h.ks + d0) : _mm512_setzero_si512();
      transpose16(r);
      for (int c = 0; c < pairs; ++c)
        _mm512_storeu_si512(sc.kt.data() + static_cast<size_t>(d0 / 2 + c) * width + j, r[c]);
    }
  }
  sc.vp.resize(static_cast<size_t>(width / 2) * D);
  std::fill(sc.vp.begin() + static_cast<size_t>((last + 1) / 2) * D, sc.vp.end(), 0u);
  const __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,  // (a[i], b[i])
                                       39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));  // (a[16 + i], b[16 + i])
  for (int j = 0; j < last; j += 2)
    for (int d = 0; d < D; d += 32) {  // rows j and j + 1 interleaved, 32 head dims at a time
      const __mmask32 take = D - d >= 32 ? ~__mmask32(0) : __mmask32(0xFFFF);
      const __m512i a = _mm512_maskz_loadu_epi16(take, h.v + j * h.vs + d);
      const __m512i b = j + 1 < last ? _mm512_maskz_loadu_epi16(take, h.v + (j + 1) * h.vs + d) : _mm512_setzero_si512();
      uint32_t* out = sc.vp.data() + static_cast<size_t>(j / 2) * D + d;
      _mm512_storeu_si512(out, _mm512_permutex2var_epi16(a, low, b));
      if (D - d >= 32) _mm512_storeu_si512(out + 16, _mm512_permutex2var_epi16(a, high, b));
    }
}

// 2^x for finite x, 0 below -125: a degree-4 polynomial on the fraction (relative error 2.6e-6, far below bf16's 2^-9,
// in 8 instructions, 9 with exp2_bf16_ps's clamp, against 10 for the fp32 kernel's degree-6 exp2_finite_ps: with
// 32-wide heads the exps cost as much as the products). Results that would be subnormal are 0: on Intel cores a
// subnormal result takes a microcode assist (letting 2^x run down to -150 made the AMX path 1.3x slower on a Xeon;
// AMD's Zen does not pay it). A degree-3 polynomial (relative error 7.5e-5) was 0-2% faster in the kernel (Zen 4,
// noise), and it moves bf16 roundings of the probabilities: a random-weight XLM-R's bf16 logits drifted past their
// test's bound with it (test_xlmr_token_classification, 0.546 -> 0.765 against a bound of 0.68).
inline __m512 exp2_finite_bf16_ps(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(9.570101276e-3f), f, _mm512_set1_ps(5.591786280e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402474433e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931217909e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.999992847e-1f));
  return _mm512_maskz_scalef_ps(normal, p, n);
}

// exp2_finite_bf16_ps where x may be -inf (masked keys): clamped at -150 first, so that 2^-inf is 0, not NaN.
inline __m512 exp2_bf16_ps(__m512 x) { return exp2_finite_bf16_ps(_mm512_max_ps(x, _mm512_set1_ps(-150.0f))); }

// One vector of 16 scores of a row (s): 2^(s * sc - m) added to sum and stored to p as bf16, lanes outside `keep`
// 0. Finite: the scores hold no -inf (no masked keys), so 2^x needs no clamp.
template <bool Finite>
__attribute__((always_inline)) inline void exps_to_bf16(const float* s, uint16_t* p, __m512 sc, __m512 m, __m512& sum,
                                                        __mmask16 keep = 0xFFFF) {
  const __m512 x = _mm512_fmsub_ps(_mm512_loadu_ps(s), sc, m);
  const __m512 e = _mm512_maskz_mov_ps(keep, Finite ? exp2_finite_bf16_ps(x) : exp2_bf16_ps(x));
  sum = _mm512_add_ps(sum, e);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits(_mm512_cvtneps_pbh(e)));
}

// softmax_rows_bf16 for R rows that each see every key of [j0, j1), their maxima already taken while the scores
// were made (rowmax): no masking pass, no max pass; keys past j1 (up to the next 16) get probability 0.
template <int R>
inline void softmax_full_rows_bf16(const float* s, uint16_t* p, int width, int j0, int j1, const __m512* rowmax,
                                   float scale, float* inv) {
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
    for (int r = 0; r < R; ++r) exps_to_bf16<true>(s + r * width + j, p + r * width + j, sc, m[r], sum[r]);
  if (full < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; ++r) exps_to_bf16<true>(s + r * width + full, p + r * width + full, sc, m[r], sum[r], tail);
  }
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) inv[r] = 1.0f / _mm512_reduce_add_ps(sum[r]);
}

// softmax_rows (varlen_common.h) for the bf16 kernel: R rows of scores in s over [j0, j1), zero outside each row's
// keys [lo[r], hi[r]); the exps go straight to bf16 probabilities in p (same row stride), their fp32 sums to inv as
// 1 / sum: one pass over the scores after the max, not three.
template <int R>
inline void softmax_rows_bf16(float* s, uint16_t* p, int width, int j0, int j1, const int* lo, const int* hi,
                              float scale, float* inv) {
  const int n = j1 - j0;
  const __m512 sc = _mm512_set1_ps(scale * LOG2E);  // exp(a) = 2^(a log2 e)
  __m512 m[R], sum[R];
  mask_and_scaled_max<R>(s, width, j0, j1, lo, hi, sc, m);
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) sum[r] = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16)
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; ++r) exps_to_bf16<false>(s + r * width + j, p + r * width + j, sc, m[r], sum[r]);
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) inv[r] = 1.0f / _mm512_reduce_add_ps(sum[r]);
}

// The AMX path of varlen_attention_bf16 (varlen_attention_amx.cpp): whether this CPU and OS allow AMX tiles, and
// query rows [row0, row1) of one head of a sequence of L tokens (head_dim a multiple of 32).
bool amx_ready();
void attend_rows_amx(const Head& h, int L, int D, int row0, int row1, bool causal, int window, float scale,
                     Scratch& sc);

}  // namespace wde::bf16
