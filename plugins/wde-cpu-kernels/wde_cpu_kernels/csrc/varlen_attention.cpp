// Varlen attention over packed sequences on an AVX-512 CPU: one (sequence, head, block of query rows)
// per work item, scores and softmax kept in a small per-thread buffer (no padded block, no mask tensor,
// no [heads, L, L] scores in memory). Inputs are fp32 or bf16 [tokens, heads, head_dim] views with a contiguous last
// dimension, the arithmetic fp32 FMAs either way (bf16 rows widened as they are packed); K is transposed per item into
// a small buffer. The parts shared with the bf16-product kernel are in varlen_common.h; setup.py compiles both into
// wde_cpu_kernels._varlen at install (its Python bindings: module_avx512.cpp).
#include "aten.h"

#include "rows_api.h"
#include "rows_avx512.h"
#include "varlen_common.h"

namespace {

using namespace wde;
using wde::rows::load16;

struct Scratch {
  std::vector<float> s, inv, kt;  // scores / probabilities [ROWS][width], 1 / sum per row, K^T
  std::vector<float> vf, qf;      // bf16 inputs: the item's V rows and the register block's query rows, widened
  __m512 rowmax[ROWS];            // each register block row's running max of its scores
};

template <typename T>
using Head = FloatHead<T>;  // varlen_items.h

constexpr __mmask16 ALL16 = 0xFFFF;

// K^T of keys [0, last) into sc.kt ([D][width], zero past `last` up to the next 16: the scores read no further), 16
// keys x 16 head dims at a time by transpose16. fp32 V is read in place (copying its rows side by side measured no
// faster); bf16 V rows are widened into sc.vf once per item, not once per register block.
template <typename T>
inline void pack_keys(Head<T>& h, Scratch& sc, int D, int last, int width) {
  sc.kt.resize(static_cast<size_t>(D) * width);
  for (int j = 0; j < last; j += 16) {
    const int keys = std::min(16, last - j);
    for (int d0 = 0; d0 < D; d0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < keys ? _mm512_castps_si512(load16(h.k + (j + i) * h.ks + d0, ALL16)) : _mm512_setzero_si512();
      transpose16(r);
      for (int c = 0; c < 16; ++c) _mm512_storeu_si512(sc.kt.data() + static_cast<size_t>(d0 + c) * width + j, r[c]);
    }
  }
  h.kt = sc.kt.data();
  h.kt_stride = width;
  if constexpr (std::is_same_v<T, float>) {
    h.vf = h.v, h.vf_stride = h.vs;
  } else {
    sc.vf.resize(static_cast<size_t>(last) * D);
    for (int j = 0; j < last; ++j)
      for (int d = 0; d < D; d += 16) _mm512_storeu_ps(sc.vf.data() + j * D + d, load16(h.v + j * h.vs + d, ALL16));
    h.vf = sc.vf.data(), h.vf_stride = D;
  }
}

// NC vectors of 16 keys from j of the register block's rows' scores (row r to s + r * width + j - j0), the last
// vector's keys up to j1 (K^T is zero past them), plus row r's position bias from brow[r][j] where brow[0] is not
// null; each row's running max of its scores kept in rowmax.
template <int NC, typename T>
inline void scores_part(const Head<T>& h, const float* const (&qrow)[ROWS], const float* const (&brow)[ROWS],
                        Scratch& sc, int width, int D, int j, int j0, int j1) {
  __m512 acc[ROWS][NC];
  zero(acc);
  const float* krow = h.kt + j;
  for (int d = 0; d < D; ++d, krow += h.kt_stride) {
    __m512 kv[NC];
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) kv[c] = _mm512_loadu_ps(krow + 16 * c);
    _Pragma("GCC unroll 16")
    for (int r = 0; r < ROWS; ++r) {
      const __m512 qb = _mm512_set1_ps(qrow[r][d]);
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(qb, kv[c], acc[r][c]);
    }
  }
  if (brow[0] != nullptr)
    _Pragma("GCC unroll 16")
    for (int r = 0; r < ROWS; ++r)
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_add_ps(acc[r][c], _mm512_loadu_ps(brow[r] + j + 16 * c));
  store_scores_and_max<NC>(acc, sc.s.data() + (j - j0), width, j1 - j, sc.rowmax);
}

// Scores of ROWS query rows from `i` (rows past `rows` repeat the last; bf16 rows widened into sc.qf first) against
// keys [j0, j1), j0 a multiple of 16, in blocks of KEYS, with the head's position bias where it has one; the last
// block only as many vectors of 16 as it needs (short sequences are most of an embedding batch: 43 keys take 3
// vectors, not 4).
template <typename T>
inline void scores(const Head<T>& h, Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
  const float* qrow[ROWS];
  if constexpr (std::is_same_v<T, float>) {
    block_rows(h.q, h.qs, i, rows, qrow);
  } else {
    const T* qb[ROWS];
    block_rows(h.q, h.qs, i, rows, qb);
    sc.qf.resize(static_cast<size_t>(ROWS) * D);
    for (int r = 0; r < ROWS; ++r) {
      for (int d = 0; d < D; d += 16) _mm512_storeu_ps(sc.qf.data() + r * D + d, load16(qb[r] + d, ALL16));
      qrow[r] = sc.qf.data() + r * D;
    }
  }
  const float* brow[ROWS];
  block_bias(h.bias, i, rows, brow);
  for (int r = 0; r < ROWS; ++r) sc.rowmax[r] = _mm512_set1_ps(-INFINITY);
  int j = j0;
  for (; j + KEYS <= j1; j += KEYS) scores_part<4>(h, qrow, brow, sc, width, D, j, j0, j1);
  switch ((j1 - j + 15) / 16) {
    case 4: scores_part<4>(h, qrow, brow, sc, width, D, j, j0, j1); break;
    case 3: scores_part<3>(h, qrow, brow, sc, width, D, j, j0, j1); break;
    case 2: scores_part<2>(h, qrow, brow, sc, width, D, j, j0, j1); break;
    case 1: scores_part<1>(h, qrow, brow, sc, width, D, j, j0, j1); break;
    default: break;
  }
}

// `rows` output rows = probabilities (ROWS rows of sc.s) x V over keys [j0, j1), scaled by 1 / sum, for NC
// vectors of head_dim from c0. Every loop bound but the key loop is a constant: accumulators stay in registers.
template <int NC, typename T>
inline void weighted_values_part(const Head<T>& h, const Scratch& sc, int width, int i, int rows, int j0, int j1, int c0) {
  __m512 acc[ROWS][NC];
  zero(acc);
  const float* vrow = h.vf + j0 * h.vf_stride + c0;
  const int64_t vs = h.vf_stride;
  const float* pcol = sc.s.data();
  const float* const pend = pcol + (j1 - j0);
  // two keys a step: each row's probability pointer is made once for both (a row offset per key, reloaded from
  // the stack where the registers run out, was as many loads as the products had)
  for (; pcol + 1 < pend; pcol += 2, vrow += 2 * vs) {
    __m512 va[NC], vb[NC];
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) {
      va[c] = _mm512_loadu_ps(vrow + 16 * c);
      vb[c] = _mm512_loadu_ps(vrow + vs + 16 * c);
    }
    _Pragma("GCC unroll 16")
    for (int r = 0; r < ROWS; ++r) {
      const float* pr = pcol + r * width;
      const __m512 pa = _mm512_set1_ps(pr[0]), pb = _mm512_set1_ps(pr[1]);
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(pb, vb[c], _mm512_fmadd_ps(pa, va[c], acc[r][c]));
    }
  }
  if (pcol < pend) {
    __m512 va[NC];
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) va[c] = _mm512_loadu_ps(vrow + 16 * c);
    _Pragma("GCC unroll 16")
    for (int r = 0; r < ROWS; ++r) {
      const __m512 pa = _mm512_set1_ps(pcol[r * width]);
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(pa, va[c], acc[r][c]);
    }
  }
  alignas(64) float tmp[ROWS][NC][16];  // constant indices only: a runtime row index would keep acc in memory
  _Pragma("GCC unroll 16")
  for (int r = 0; r < ROWS; ++r)
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) _mm512_store_ps(tmp[r][c], _mm512_mul_ps(acc[r][c], _mm512_set1_ps(sc.inv[r])));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < NC; ++c) wde::rows::store16(h.out + (i + r) * h.os + c0 + 16 * c, _mm512_load_ps(tmp[r][c]), ALL16);
}

template <typename T>
inline void weighted_values(const Head<T>& h, const Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
  int c0 = 0;
  for (; c0 + 64 <= D; c0 += 64) weighted_values_part<4>(h, sc, width, i, rows, j0, j1, c0);
  switch ((D - c0) / 16) {
    case 3: weighted_values_part<3>(h, sc, width, i, rows, j0, j1, c0); break;
    case 2: weighted_values_part<2>(h, sc, width, i, rows, j0, j1, c0); break;
    case 1: weighted_values_part<1>(h, sc, width, i, rows, j0, j1, c0); break;
    default: break;
  }
}

struct Fp32 {  // fp32 FMAs on fp32 or (widened) bf16 rows
  static constexpr int kRows = ROWS, kKeys = KEYS;
  template <typename T>
  static void pack(Head<T>& h, Scratch& sc, int D, int last, int width) { pack_keys(h, sc, D, last, width); }
  template <typename T>
  static void scores(const Head<T>& h, Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    ::scores(h, sc, width, D, i, rows, j0, j1);
  }
  // Rows that each see every key the block scored (no causal or window edge inside it: every encoder batch) take
  // the one-pass softmax; the fp32 exps stay in place.
  static void softmax(Scratch& sc, int width, int j0, int j1, const int* lo, const int* hi, float scale) {
    if (rows_see_every_key<ROWS>(j0, lo, hi)) {
      softmax_full_rows<ROWS>(sc.s.data(), width, j0, hi[ROWS - 1], sc.rowmax, scale, sc.inv.data());
      return;
    }
    softmax_rows<ROWS>(sc.s.data(), width, j0, j1, lo, hi, scale, sc.inv.data());
  }
  template <typename T>
  static void weighted_values(const Head<T>& h, const Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    ::weighted_values(h, sc, width, D, i, rows, j0, j1);
  }
};

}  // namespace

at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& cu, bool causal, int64_t window, double scale,
                            const std::vector<int64_t>& cu_k, const c10::optional<at::Tensor>& bias) {
  return attend_float<Fp32, Scratch>(q, k, v, cu, causal, window, scale, cu_k, 16, bias);  // varlen_items.h, D % 16
}
