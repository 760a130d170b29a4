// What the AVX2 kernels (varlen_attention_avx2.cpp, quantize_avx2.cpp) share: 8 values of a fp32 or bf16 row as fp32,
// and back (the last `n` < 8 of a row masked), and the horizontal sum and max of 8 lanes. AVX2 + FMA, no AVX-512:
// AMD Zen 1-3, Intel cores before Skylake-SP and Intel's client cores.
#pragma once
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace wde::avx2 {

// lanes [0, n) set (n in 0 .. 8)
inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const c10::BFloat16* p) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}
// the first n of 8 values (n < 8), zero after
inline __m256 load8(const float* p, int64_t n) { return _mm256_maskload_ps(p, first_lanes(n)); }
inline __m256 load8(const c10::BFloat16* p, int64_t n) {
  alignas(16) c10::BFloat16 part[8] = {};
  std::memcpy(part, p, n * sizeof(c10::BFloat16));
  return load8(part);
}

// 8 fp32 values rounded half to even to bf16 (integer arithmetic, finite values), in the low 128 bits
inline __m128i round_to_bf16(__m256 v) {
  __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  bits = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  // packus per 128-bit lane gives [0-3, 0-3 | 4-7, 4-7]; 64-bit blocks 0 and 2 are the 8 values in order
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08));
}

inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(c10::BFloat16* p, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), round_to_bf16(v)); }
// the first n of 8 values (n < 8)
inline void store8(float* p, __m256 v, int64_t n) { _mm256_maskstore_ps(p, first_lanes(n), v); }
inline void store8(c10::BFloat16* p, __m256 v, int64_t n) {
  alignas(16) c10::BFloat16 part[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(part), round_to_bf16(v));
  std::memcpy(p, part, n * sizeof(c10::BFloat16));
}

inline float reduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float reduce_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

}  // namespace wde::avx2
