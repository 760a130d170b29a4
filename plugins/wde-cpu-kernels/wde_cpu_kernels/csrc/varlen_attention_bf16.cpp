// The bf16 varlen attention kernel: bf16 q, k, v in, bf16 out, products by AVX512-BF16 pair dot products
// (vdpbf16ps: two bf16 products per fp32 lane), softmax in fp32; on AMX CPUs by tile products instead
// (varlen_attention_amx.cpp). Keys are packed as (d, d+1) pairs per key,
// values as (row j, row j+1) pairs per head dim, probabilities rounded to bf16 for the weighted sum (as a
// bf16 matrix product would), their exps by a short polynomial (softmax_rows_bf16; where every row of a register
// block sees all the keys it scored, softmax_full_rows_bf16 with the rows' maxima taken from the scores' registers).
// Compiled with -mavx512bf16 (setup.py); called only where the CPU has AVX512-BF16.
#include "aten.h"

#include <cstring>

#include "varlen_bf16.h"
#include "varlen_common.h"

#ifdef __AVX512BF16__
namespace {

using namespace wde;
using namespace wde::bf16;

struct Bf16 {
  static constexpr int kRows = ROWS, kKeys = KEYS;
  static void pack(const Head& h, Scratch& sc, int D, int last, int width) {
    bf16::pack(h, sc, D, last, width);
    sc.p.resize(static_cast<size_t>(ROWS) * width);
  }

  template <int NC>  // NC vectors of 16 keys from j, the last one's keys up to j1; rows' running max in sc.rowmax
  static void scores_part(const uint16_t* const (&qrow)[ROWS], Scratch& sc, int width, int D, int j, int j0, int j1) {
    // a short last block (NC <= 2) has too few chains for vdpbf16ps's latency: odd head-dim pairs go to a second set
    // of accumulators (D is a multiple of 16: the pairs come in fours)
    constexpr int SETS = NC <= 2 ? 2 : 1;
    __m512 acc[ROWS][NC], acc2[ROWS][NC];
    zero(acc);
    if constexpr (SETS == 2) zero(acc2);
    auto step = [&](int d, const uint32_t* krow, __m512 (&into)[ROWS][NC]) __attribute__((always_inline)) {
      __m512i kv[NC];
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) kv[c] = _mm512_loadu_si512(krow + 16 * c);
      _Pragma("GCC unroll 16")
      for (int r = 0; r < ROWS; ++r) {
        const __m512i qb = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(qrow[r] + d));
        _Pragma("GCC unroll 16")
        for (int c = 0; c < NC; ++c) into[r][c] = _mm512_dpbf16_ps(into[r][c], as_bh(qb), as_bh(kv[c]));
      }
    };
    const uint32_t* krow = sc.kt.data() + j;
    if constexpr (SETS == 2) {
      for (int d = 0; d < D; d += 4, krow += 2 * width) {
        step(d, krow, acc);
        step(d + 2, krow + width, acc2);
      }
      add_into(acc, acc2);
    } else {
      for (int d = 0; d < D; d += 2, krow += width) step(d, krow, acc);
    }
    store_scores_and_max<NC>(acc, sc.s.data() + (j - j0), width, j1 - j, sc.rowmax);
  }

  // Scores of keys [j0, j1) in blocks of KEYS, the last block only as many vectors of 16 as it needs (short
  // sequences are most of an embedding batch: 43 keys take 3 vectors, not 4)
  static void scores(const Head& h, Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    const uint16_t* qrow[ROWS];
    block_rows(h.q, h.qs, i, rows, qrow);
    for (int r = 0; r < ROWS; ++r) sc.rowmax[r] = _mm512_set1_ps(-INFINITY);
    int j = j0;
    for (; j + KEYS <= j1; j += KEYS) scores_part<4>(qrow, sc, width, D, j, j0, j1);
    switch ((j1 - j + 15) / 16) {
      case 4: scores_part<4>(qrow, sc, width, D, j, j0, j1); break;
      case 3: scores_part<3>(qrow, sc, width, D, j, j0, j1); break;
      case 2: scores_part<2>(qrow, sc, width, D, j, j0, j1); break;
      case 1: scores_part<1>(qrow, sc, width, D, j, j0, j1); break;
      default: break;
    }
  }

  // Rows that each see every key the block scored (no causal or window edge inside it) take the fast softmax. The
  // block scored keys [j0, the last row's end): scores() got that end as j1; here j1 is rounded up to 16.
  static void softmax(Scratch& sc, int width, int j0, int j1, const int* lo, const int* hi, float scale) {
    if (rows_see_every_key<ROWS>(j0, lo, hi)) {
      softmax_full_rows_bf16<ROWS>(sc.s.data(), sc.p.data(), width, j0, hi[ROWS - 1], sc.rowmax, scale, sc.inv.data());
      return;
    }
    softmax_rows_bf16<ROWS>(sc.s.data(), sc.p.data(), width, j0, j1, lo, hi, scale, sc.inv.data());
  }

  template <int NC>
  static void weighted_values_part(const Head& h, const Scratch& sc, int width, int D, int i, int rows, int j0,
                                   int j1, int c0) {
    // With NC <= 2 (head sizes up to 32) one set of ROWS x NC accumulators is too few chains to hide vdpbf16ps's
    // latency (6 cycles, two issued a cycle on Zen 5: 12 chains at best): odd key pairs then go to a second set.
    constexpr int SETS = NC <= 2 ? 2 : 1;
    __m512 acc[ROWS][NC], acc2[ROWS][NC];
    zero(acc);
    if constexpr (SETS == 2) zero(acc2);
    const uint32_t* vrow = sc.vp.data() + static_cast<size_t>(j0 / 2) * D + c0;
    const uint16_t* pcol = sc.p.data();
    const uint16_t* const pend = pcol + (j1 - j0);
    auto pair = [&](const uint16_t* pc, const uint32_t* vr, __m512 (&into)[ROWS][NC]) __attribute__((always_inline)) {
      __m512i vv[NC];
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_si512(vr + 16 * c);
      _Pragma("GCC unroll 16")
      for (int r = 0; r < ROWS; ++r) {
        const __m512i pb = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(pc + r * width));
        _Pragma("GCC unroll 16")
        for (int c = 0; c < NC; ++c) into[r][c] = _mm512_dpbf16_ps(into[r][c], as_bh(pb), as_bh(vv[c]));
      }
    };
    if constexpr (SETS == 2)  // j0 is even; a pair past j1 has probability 0
      for (; pcol + 2 < pend; pcol += 4, vrow += 2 * D) {
        pair(pcol, vrow, acc);
        pair(pcol + 2, vrow + D, acc2);
      }
    for (; pcol < pend; pcol += 2, vrow += D) pair(pcol, vrow, acc);
    if constexpr (SETS == 2) add_into(acc, acc2);
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

// As varlen_attention (cu_k included), for bf16 q, k, v (head_dim contiguous); returns bf16 [T, H, D]. With `amx`, head sizes that are
// a multiple of 32 go through AMX tiles where the CPU and OS allow them (varlen_attention_amx.cpp).
at::Tensor varlen_attention_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<int64_t>& cu, bool causal, int64_t window, double scale, bool amx,
                                 const std::vector<int64_t>& cu_k) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 &&
              v.scalar_type() == at::kBFloat16, "varlen_attention_bf16 takes bfloat16");
  TORCH_CHECK(q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1, "head_dim must be contiguous");
  TORCH_CHECK(q.size(2) % 16 == 0 && q.size(1) % v.size(1) == 0, "head_dim % 16 and heads % kv heads must be 0");
  const int heads = q.size(1), D = q.size(2);
  const std::vector<int64_t>& ck = key_bounds(cu, cu_k, q.size(0), k.size(0));
  at::Tensor out = at::empty({q.size(0), heads, D}, q.options());
  const bool tiles = amx && D % 32 == 0 && amx_ready();
  auto ptr = [](const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); };
  for_each_item<Scratch>(cu, ck, heads, heads / v.size(1), [&](int64_t q0, int64_t k0, int L, int hd, int kvh, int row0,
                                                               int row1, Scratch& sc) {
    Head h{ptr(q) + q0 * q.stride(0) + hd * q.stride(1), ptr(k) + k0 * k.stride(0) + kvh * k.stride(1),
           ptr(v) + k0 * v.stride(0) + kvh * v.stride(1), ptr(out) + q0 * out.stride(0) + hd * out.stride(1),
           q.stride(0), k.stride(0), v.stride(0), out.stride(0)};
    if (tiles)
      attend_rows_amx(h, L, D, row0, row1, causal, static_cast<int>(window), static_cast<float>(scale), sc);
    else
      attend_rows<Bf16>(h, L, D, row0, row1, causal, static_cast<int>(window), static_cast<float>(scale), sc);
  });
  return out;
}

bool amx_available() { return amx_ready(); }
#endif
