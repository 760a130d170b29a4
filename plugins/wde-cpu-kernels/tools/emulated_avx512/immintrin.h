// AVX-512 (F, DQ, BW, VL, BF16) in portable code, for checking the AVX-512 build's results on a CPU without AVX-512
// (build.py puts this directory first on the include path): SIMDe's native aliases (libsimde-dev, 0.7.4), plus the
// intrinsics SIMDe 0.7.4 lacks, written from Intel's intrinsics guide. AMX is not emulated (its path is compiled out).
#pragma once
#include_next <immintrin.h>
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <cmath>
#include <cstring>

namespace wde_emu {
inline simde__m512 maskz_loadu_ps(simde__mmask16 k, const void* p) {
  simde__m512_private r; const float* f = static_cast<const float*>(p);
  for (int i = 0; i < 16; ++i) r.f32[i] = (k >> i) & 1 ? f[i] : 0.0f;
  return simde__m512_from_private(r);
}
inline simde__m512i maskz_loadu_epi32(simde__mmask16 k, const void* p) {
  simde__m512i_private r; const int32_t* f = static_cast<const int32_t*>(p);
  for (int i = 0; i < 16; ++i) r.i32[i] = (k >> i) & 1 ? f[i] : 0;
  return simde__m512i_from_private(r);
}
inline simde__m512i maskz_loadu_epi16_512(simde__mmask32 k, const void* p) {
  simde__m512i_private r; const int16_t* f = static_cast<const int16_t*>(p);
  for (int i = 0; i < 32; ++i) r.i16[i] = (k >> i) & 1 ? f[i] : 0;
  return simde__m512i_from_private(r);
}
inline simde__m256i maskz_loadu_epi16_256(simde__mmask16 k, const void* p) {
  simde__m256i_private r; const int16_t* f = static_cast<const int16_t*>(p);
  for (int i = 0; i < 16; ++i) r.i16[i] = (k >> i) & 1 ? f[i] : 0;
  return simde__m256i_from_private(r);
}
inline void mask_storeu_ps(void* p, simde__mmask16 k, simde__m512 a) {
  simde__m512_private v = simde__m512_to_private(a); float* f = static_cast<float*>(p);
  for (int i = 0; i < 16; ++i) if ((k >> i) & 1) f[i] = v.f32[i];
}
inline void mask_storeu_epi16_256(void* p, simde__mmask16 k, simde__m256i a) {
  simde__m256i_private v = simde__m256i_to_private(a); int16_t* f = static_cast<int16_t*>(p);
  for (int i = 0; i < 16; ++i) if ((k >> i) & 1) f[i] = v.i16[i];
}
inline void mask_storeu_epi8_128(void* p, simde__mmask16 k, simde__m128i a) {
  simde__m128i_private v = simde__m128i_to_private(a); int8_t* f = static_cast<int8_t*>(p);
  for (int i = 0; i < 16; ++i) if ((k >> i) & 1) f[i] = v.i8[i];
}
inline float reduce_add_ps(simde__m512 a) {  // the order of gcc's _mm512_reduce_add_ps: halves folded
  simde__m512_private v = simde__m512_to_private(a); float t[16]; for (int i = 0; i < 16; ++i) t[i] = v.f32[i];
  for (int w = 8; w >= 1; w /= 2) for (int i = 0; i < w; ++i) t[i] = t[i] + t[i + w];
  return t[0];
}
inline float reduce_max_ps(simde__m512 a) {
  simde__m512_private v = simde__m512_to_private(a); float t[16]; for (int i = 0; i < 16; ++i) t[i] = v.f32[i];
  for (int w = 8; w >= 1; w /= 2) for (int i = 0; i < w; ++i) t[i] = t[i] > t[i + w] ? t[i] : t[i + w];
  return t[0];
}
inline simde__m512i cvtps_epi32(simde__m512 a) {  // round to nearest even (MXCSR's default); out of range: INT_MIN
  simde__m512_private v = simde__m512_to_private(a); simde__m512i_private r;
  for (int i = 0; i < 16; ++i) {
    float x = std::nearbyint(v.f32[i]);
    r.i32[i] = (x >= -2147483648.0f && x < 2147483648.0f) ? int32_t(x) : INT32_MIN;
  }
  return simde__m512i_from_private(r);
}
inline simde__m512i cvtepu16_epi32(simde__m256i a) {
  simde__m256i_private v = simde__m256i_to_private(a); simde__m512i_private r;
  for (int i = 0; i < 16; ++i) r.i32[i] = v.u16[i];
  return simde__m512i_from_private(r);
}
inline simde__m256i cvtepi32_epi16(simde__m512i a) {  // truncation
  simde__m512i_private v = simde__m512i_to_private(a); simde__m256i_private r;
  for (int i = 0; i < 16; ++i) r.i16[i] = int16_t(v.i32[i]);
  return simde__m256i_from_private(r);
}
inline simde__m256bh cvtneps_pbh(simde__m512 a) {  // round to nearest even, NaN quieted, denormals kept
  simde__m512_private v = simde__m512_to_private(a); simde__m256bh_private r;
  for (int i = 0; i < 16; ++i) {
    float x = v.f32[i]; uint32_t bits; std::memcpy(&bits, &x, 4);
    r.u16[i] = std::isnan(v.f32[i]) ? uint16_t((bits >> 16) | 0x40)
                                    : uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
  }
  return simde__m256bh_from_private(r);
}
}  // namespace wde_emu

#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) wde_emu::maskz_loadu_ps(k, p)
#undef _mm512_maskz_loadu_epi32
#define _mm512_maskz_loadu_epi32(k, p) wde_emu::maskz_loadu_epi32(k, p)
#undef _mm512_maskz_loadu_epi16
#define _mm512_maskz_loadu_epi16(k, p) wde_emu::maskz_loadu_epi16_512(k, p)
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16(k, p) wde_emu::maskz_loadu_epi16_256(k, p)
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, a) wde_emu::mask_storeu_ps(p, k, a)
#undef _mm256_mask_storeu_epi16
#define _mm256_mask_storeu_epi16(p, k, a) wde_emu::mask_storeu_epi16_256(p, k, a)
#undef _mm_mask_storeu_epi8
#define _mm_mask_storeu_epi8(p, k, a) wde_emu::mask_storeu_epi8_128(p, k, a)
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(a) wde_emu::reduce_add_ps(a)
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps(a) wde_emu::reduce_max_ps(a)
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32(a) wde_emu::cvtps_epi32(a)
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32(a) wde_emu::cvtepu16_epi32(a)
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16(a) wde_emu::cvtepi32_epi16(a)
#undef _mm512_cvtneps_pbh
#define _mm512_cvtneps_pbh(a) wde_emu::cvtneps_pbh(a)
// the sources compile their AVX512-BF16 paths under this macro (after SIMDe, which would take it for the native ISA)
#ifndef __AVX512BF16__
#define __AVX512BF16__ 1
#endif
