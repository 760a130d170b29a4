// What the row kernels (quantize.cpp, layer_norm.cpp) share: 16 values of a fp32 or bf16 row as fp32, and back.
#pragma once
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cstdint>

namespace wde::rows {

// the mask of the 16 columns from c on, of cols (a masked load and store for a row's tail)
inline __mmask16 take16(int64_t c, int64_t cols) {
  return cols - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (cols - c)) - 1);
}

// 16 values of a row as fp32 (a masked load for the tail)
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const c10::BFloat16* p, __mmask16 m) {
  __m256i half = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// 16 fp32 values rounded half to even to bf16 (integer arithmetic: any AVX-512 CPU, finite values)
inline __m256i round_to_bf16(__m512 v) {
  __m512i bits = _mm512_castps_si512(v);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  bits = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16));
}

inline void store16(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
inline void store16(c10::BFloat16* p, __m512 v, __mmask16 m) { _mm256_mask_storeu_epi16(p, m, round_to_bf16(v)); }

}  // namespace wde::rows
