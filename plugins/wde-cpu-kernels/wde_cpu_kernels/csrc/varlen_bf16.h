// What the bf16 kernel's AVX512-BF16 and AMX paths share: the per-thread scratch buffers, one (sequence, head)'s
// rows, and the packing of keys and values into the pair layouts both kinds of bf16 dot product take.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace wde::bf16 {

struct Scratch {
  std::vector<float> s, inv;  // scores [rows][width] (fp32 exps after the softmax), 1 / sum per row
  std::vector<uint32_t> kt;   // [D / 2][width]: key j's (d, d + 1) pair
  std::vector<uint32_t> vp;   // [width / 2][D]: (row j, row j + 1) pair of head dim d, j even
  std::vector<uint16_t> p;    // [rows][width] probabilities in bf16
  std::vector<uint16_t> qb;   // [16][D]: the AMX path's block of query rows
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

// A row's fp32 exps e[0, n) rounded to bf16 probabilities in p (n a multiple of 16), as a bf16 matrix product takes them.
inline void round_row(const float* e, uint16_t* p, int n) {
  for (int j = 0; j < n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), bits(_mm512_cvtneps_pbh(_mm512_loadu_ps(e + j))));
}

// Packs keys [0, last) as (d, d + 1) pairs per key (kt, zero past `last`) and values as (row j, row j + 1) pairs per
// head dim (vp, zero past `last`: the AMX path reads whole chunks of 32 keys).
inline void pack(const Head& h, Scratch& sc, int D, int last, int width) {
  sc.kt.resize(static_cast<size_t>(D / 2) * width);  // only the padding past the gathered blocks is zeroed
  const int gathered = (last + 15) & ~15;
  for (int d = 0; d < D; d += 2)
    std::fill(sc.kt.data() + static_cast<size_t>(d / 2) * width + gathered,
              sc.kt.data() + static_cast<size_t>(d / 2 + 1) * width, 0u);
  const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int>(h.ks)));
  for (int j = 0; j < last; j += 16) {
    const __mmask16 valid = static_cast<__mmask16>((1u << std::min(16, last - j)) - 1u);
    for (int d = 0; d < D; d += 2) {
      const __m512i pair = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, rows, h.k + j * h.ks + d, 2);
      _mm512_storeu_si512(sc.kt.data() + static_cast<size_t>(d / 2) * width + j, pair);
    }
  }
  sc.vp.resize(static_cast<size_t>(width / 2) * D);
  std::fill(sc.vp.begin() + static_cast<size_t>((last + 1) / 2) * D, sc.vp.end(), 0u);
  for (int j = 0; j < last; j += 2)
    for (int d = 0; d < D; d += 16) {
      const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h.v + j * h.vs + d)));
      const __m512i b = j + 1 < last ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                           reinterpret_cast<const __m256i*>(h.v + (j + 1) * h.vs + d))), 16)
                                     : _mm512_setzero_si512();
      _mm512_storeu_si512(sc.vp.data() + static_cast<size_t>(j / 2) * D + d, _mm512_or_si512(a, b));
    }
}


// The AMX path of varlen_attention_bf16 (varlen_attention_amx.cpp): whether this CPU and OS allow AMX tiles, and
// query rows [row0, row1) of one head of a sequence of L tokens (head_dim a multiple of 32).
bool amx_ready();
void attend_rows_amx(const Head& h, int L, int D, int row0, int row1, bool causal, int window, float scale,
                     Scratch& sc);

}  // namespace wde::bf16
