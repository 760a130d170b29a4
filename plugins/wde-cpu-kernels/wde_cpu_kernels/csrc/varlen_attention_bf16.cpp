// The bf16 varlen attention kernel: bf16 q, k, v in, bf16 out, products by AVX512-BF16 pair dot products
// (vdpbf16ps: two bf16 products per fp32 lane), softmax in fp32. Keys are packed as (d, d+1) pairs per key,
// values as (row j, row j+1) pairs per head dim, probabilities rounded to bf16 for the weighted sum (as a
// bf16 matrix product would). Compiled with -mavx512bf16 (setup.py); called only where the CPU has AVX512-BF16.
#include <torch/extension.h>

#include <cstring>

#include "varlen_common.h"

#ifdef __AVX512BF16__
namespace {

using namespace wde;

struct Scratch {
  std::vector<float> s, inv;  // scores [ROWS][width] (fp32 exps after the softmax), 1 / sum per row
  std::vector<uint32_t> kt;   // [D / 2][width]: key j's (d, d + 1) pair
  std::vector<uint32_t> vp;   // [width / 2][D]: (row j, row j + 1) pair of head dim d, j even
  std::vector<uint16_t> p;    // [ROWS][width] probabilities in bf16
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

struct Bf16 {
  static void pack(Head& h, Scratch& sc, int D, int last, int width) {
    sc.kt.assign(static_cast<size_t>(D / 2) * width, 0u);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(static_cast<int>(h.ks)));
    for (int j = 0; j < last; j += 16) {
      const __mmask16 valid = static_cast<__mmask16>((1u << std::min(16, last - j)) - 1u);
      for (int d = 0; d < D; d += 2) {
        const __m512i pair = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, rows, h.k + j * h.ks + d, 2);
        _mm512_storeu_si512(sc.kt.data() + static_cast<size_t>(d / 2) * width + j, pair);
      }
    }
    sc.vp.assign(static_cast<size_t>(width / 2) * D, 0u);
    for (int j = 0; j < last; j += 2)
      for (int d = 0; d < D; d += 16) {
        const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h.v + j * h.vs + d)));
        const __m512i b = j + 1 < last ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                             reinterpret_cast<const __m256i*>(h.v + (j + 1) * h.vs + d))), 16)
                                       : _mm512_setzero_si512();
        _mm512_storeu_si512(sc.vp.data() + static_cast<size_t>(j / 2) * D + d, _mm512_or_si512(a, b));
      }
    sc.p.resize(static_cast<size_t>(ROWS) * width);
  }

  static void scores(const Head& h, Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    const uint16_t* qrow[ROWS];
    block_rows(h.q, h.qs, i, rows, qrow);
    for (int j = j0; j < j1; j += KEYS) {
      __m512 acc[ROWS][4];
      zero(acc);
      for (int d = 0; d < D; d += 2) {
        const uint32_t* krow = sc.kt.data() + static_cast<size_t>(d / 2) * width + j;
        __m512i kv[4];
        _Pragma("GCC unroll 16")
        for (int c = 0; c < 4; ++c) kv[c] = _mm512_loadu_si512(krow + 16 * c);
        _Pragma("GCC unroll 16")
        for (int r = 0; r < ROWS; ++r) {
          const __m512i qb = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(qrow[r] + d));
          _Pragma("GCC unroll 16")
          for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], as_bh(qb), as_bh(kv[c]));
        }
      }
      _Pragma("GCC unroll 16")
      for (int r = 0; r < ROWS; ++r)
        _Pragma("GCC unroll 16")
        for (int c = 0; c < 4; ++c) _mm512_storeu_ps(sc.s.data() + r * width + (j - j0) + 16 * c, acc[r][c]);
    }
  }

  static void probabilities(Scratch& sc, int r, int width, int n) {
    const float* e = sc.s.data() + r * width;
    uint16_t* p = sc.p.data() + r * width;
    for (int j = 0; j < n; j += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), bits(_mm512_cvtneps_pbh(_mm512_loadu_ps(e + j))));
  }

  template <int NC>
  static void weighted_values_part(const Head& h, const Scratch& sc, int width, int D, int i, int rows, int j0,
                                   int j1, int c0) {
    __m512 acc[ROWS][NC];
    zero(acc);
    for (int j = j0; j < j1; j += 2) {  // j0 is even; a pair past j1 has probability 0
      const uint32_t* vrow = sc.vp.data() + static_cast<size_t>(j / 2) * D + c0;
      __m512i vv[NC];
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_si512(vrow + 16 * c);
      _Pragma("GCC unroll 16")
      for (int r = 0; r < ROWS; ++r) {
        const __m512i pb = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(sc.p.data() + r * width + (j - j0)));
        _Pragma("GCC unroll 16")
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], as_bh(pb), as_bh(vv[c]));
      }
    }
    alignas(64) uint16_t tmp[ROWS][NC][16];  // constant indices only: acc stays in registers
    _Pragma("GCC unroll 16")
    for (int r = 0; r < ROWS; ++r)
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c)
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp[r][c]),
                           bits(_mm512_cvtneps_pbh(_mm512_mul_ps(acc[r][c], _mm512_set1_ps(sc.inv[r])))));
    for (int r = 0; r < rows; ++r) std::copy(tmp[r][0], tmp[r][0] + 16 * NC, h.out + (i + r) * h.os + c0);
  }

  static void weighted_values(const Head& h, const Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    int c0 = 0;
    for (; c0 + 64 <= D; c0 += 64) weighted_values_part<4>(h, sc, width, D, i, rows, j0, j1, c0);
    switch ((D - c0) / 16) {
      case 3: weighted_values_part<3>(h, sc, width, D, i, rows, j0, j1, c0); break;
      case 2: weighted_values_part<2>(h, sc, width, D, i, rows, j0, j1, c0); break;
      case 1: weighted_values_part<1>(h, sc, width, D, i, rows, j0, j1, c0); break;
      default: break;
    }
  }
};

}  // namespace

// As varlen_attention, for bf16 q, k, v (head_dim contiguous); returns bf16 [T, H, D].
at::Tensor varlen_attention_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<int64_t>& cu, bool causal, int64_t window, double scale) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 &&
              v.scalar_type() == at::kBFloat16, "varlen_attention_bf16 takes bfloat16");
  TORCH_CHECK(q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1, "head_dim must be contiguous");
  TORCH_CHECK(q.size(2) % 16 == 0 && q.size(1) % v.size(1) == 0, "head_dim % 16 and heads % kv heads must be 0");
  const int heads = q.size(1), D = q.size(2);
  at::Tensor out = at::empty({q.size(0), heads, D}, q.options());
  auto ptr = [](const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); };
  for_each_item<Scratch>(cu, heads, heads / v.size(1), [&](int64_t start, int L, int hd, int kvh, int row0, int row1,
                                                           Scratch& sc) {
    Head h{ptr(q) + start * q.stride(0) + hd * q.stride(1), ptr(k) + start * k.stride(0) + kvh * k.stride(1),
           ptr(v) + start * v.stride(0) + kvh * v.stride(1), ptr(out) + start * out.stride(0) + hd * out.stride(1),
           q.stride(0), k.stride(0), v.stride(0), out.stride(0)};
    attend_rows<Bf16>(h, L, D, row0, row1, causal, static_cast<int>(window), static_cast<float>(scale), sc);
  });
  return out;
}
#endif
