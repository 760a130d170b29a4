// Varlen attention over packed sequences on an AVX2 CPU (no AVX-512: AMD Zen 1-3, older and client Intel cores), the
// AVX-512 fp32 kernel's method (varlen_attention.cpp) in 8-lane vectors: one (sequence, head, block of query rows) per
// work item (varlen_items.h), K transposed per item into a small buffer, scores and softmax in a per-thread buffer, fp32
// FMAs on fp32 or widened bf16 rows. 16 registers: register blocks of 6 query rows x 16 keys (scores) and 6 rows x 16
// head dims (the weighted sum of values), 12 accumulators each, enough chains for two FMAs a cycle at 4 cycles' latency.
#include "aten.h"

#include <cmath>

#include "rows_avx2.h"
#include "varlen_items.h"

namespace {

using namespace wde;
using namespace wde::avx2;

constexpr int ROWS = 6;    // query rows per register block
constexpr int KEYS = 16;   // keys per register block of scores (2 vectors of 8)
constexpr int DIMS = 16;   // head dims per register block of the weighted sum
constexpr float LOG2E = 1.44269504088896341f;

struct Scratch {
  std::vector<float> s, inv, kt;  // scores / probabilities [ROWS][width], 1 / sum per row, K^T
  std::vector<float> vf, qf;      // bf16 inputs: the item's V rows and the register block's query rows, widened
  __m256 rowmax[ROWS];            // each register block row's running max of its scores
};

template <typename T>
using Head = FloatHead<T>;

// Every accumulator of a register block set to 0 (constant bounds, inlined: they stay in registers).
template <int R, int C>
__attribute__((always_inline)) inline void zero(__m256 (&acc)[R][C]) {
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r)
    _Pragma("GCC unroll 16")
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
}

// r[c] becomes column c of the 8 x 8 block of floats r (unpacks, shuffles within lanes, then across them).
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {  // s[4i + m]: columns m | m + 4 of rows 4i .. 4i + 3
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) {
    r[m] = _mm256_permute2f128_ps(s[m], s[4 + m], 0x20);
    r[4 + m] = _mm256_permute2f128_ps(s[m], s[4 + m], 0x31);
  }
}

// 2^x, 0 below -125 and for -inf (the AVX-512 kernel's Cephes polynomial; 2^n built in the exponent bits)
inline __m256 exp2_ps(__m256 x) {
  const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-125.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-125.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.535336188319500e-4f), f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(pow2n)), normal);
}

// K^T of keys [0, last) into sc.kt ([D][width], zero past `last` up to the next 16), 8 keys x 8 dims at a time; fp32 V
// is read in place, bf16 V widened into sc.vf once per item.
template <typename T>
inline void pack_keys(Head<T>& h, Scratch& sc, int D, int last, int width) {
  sc.kt.resize(static_cast<size_t>(D) * width);
  for (int j = 0; j < ((last + 15) & ~15); j += 8) {
    const int keys = std::max(0, std::min(8, last - j));
    for (int d0 = 0; d0 < D; d0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = i < keys ? load8(h.k + (j + i) * h.ks + d0) : _mm256_setzero_ps();
      transpose8(r);
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(sc.kt.data() + static_cast<size_t>(d0 + c) * width + j, r[c]);
    }
  }
  h.kt = sc.kt.data();
  h.kt_stride = width;
  if constexpr (std::is_same_v<T, float>) {
    h.vf = h.v, h.vf_stride = h.vs;
  } else {
    sc.vf.resize(static_cast<size_t>(last) * D);
    for (int j = 0; j < last; ++j)
      for (int d = 0; d < D; d += 8) _mm256_storeu_ps(sc.vf.data() + j * D + d, load8(h.v + j * h.vs + d));
    h.vf = sc.vf.data(), h.vf_stride = D;
  }
}

// NC vectors of 8 keys from j of the register block's scores (row r to s + r * width + j - j0), plus row r's position
// bias from brow[r][j] where brow[0] is not null, each row's running max raised by those before j1 (K^T is zero past
// them).
template <int NC, typename T>
inline void scores_part(const Head<T>& h, const float* const (&qrow)[ROWS], const float* const (&brow)[ROWS],
                        Scratch& sc, int width, int D, int j, int j0, int j1) {
  __m256 acc[ROWS][NC];
  zero(acc);
  const float* krow = h.kt + j;
  for (int d = 0; d < D; ++d, krow += h.kt_stride) {
    __m256 kv[NC];
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) kv[c] = _mm256_loadu_ps(krow + 8 * c);
    _Pragma("GCC unroll 16")
    for (int r = 0; r < ROWS; ++r) {
      const __m256 qb = _mm256_broadcast_ss(qrow[r] + d);
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_fmadd_ps(qb, kv[c], acc[r][c]);
    }
  }
  if (brow[0] != nullptr)
    _Pragma("GCC unroll 16")
    for (int r = 0; r < ROWS; ++r)
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_loadu_ps(brow[r] + j + 8 * c));
  float* s = sc.s.data() + (j - j0);
  const __m256 counted = _mm256_castsi256_ps(first_lanes(std::min(8, j1 - j - 8 * (NC - 1))));
  const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
  _Pragma("GCC unroll 16")
  for (int r = 0; r < ROWS; ++r) {
    __m256 m = sc.rowmax[r];
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) {
      _mm256_storeu_ps(s + r * width + 8 * c, acc[r][c]);
      m = _mm256_max_ps(m, c + 1 < NC ? acc[r][c] : _mm256_blendv_ps(minus_inf, acc[r][c], counted));
    }
    sc.rowmax[r] = m;
  }
}

// Scores of ROWS query rows from `i` (rows past `rows` repeat the last; bf16 rows widened into sc.qf) against keys
// [j0, j1), j0 a multiple of 16, KEYS at a time, the last block 8 keys where that covers it; with the head's position
// bias where it has one.
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
      for (int d = 0; d < D; d += 8) _mm256_storeu_ps(sc.qf.data() + r * D + d, load8(qb[r] + d));
      qrow[r] = sc.qf.data() + r * D;
    }
  }
  const float* brow[ROWS];
  block_bias(h.bias, i, rows, brow);
  for (int r = 0; r < ROWS; ++r) sc.rowmax[r] = _mm256_set1_ps(-INFINITY);
  int j = j0;
  for (; j + 8 < j1; j += KEYS) scores_part<2>(h, qrow, brow, sc, width, D, j, j0, j1);
  if (j < j1) scores_part<1>(h, qrow, brow, sc, width, D, j, j0, j1);
}

// exp(scale * (score - row max)) of the ROWS rows over [j0, j1) in place and inv[r] = 1 / their sum. `full`: every row
// sees every key of [j0, j1) (no causal or window edge: every encoder batch) and its max is sc.rowmax; else scores
// outside each row's keys [lo[r], hi[r]) are masked first and the max taken over the rest. Keys past j1 up to the
// next 8 get probability 0.
inline void softmax(Scratch& sc, int width, int j0, int j1, const int* lo, const int* hi, float scale, bool full) {
  const int n = j1 - j0;
  const __m256 sc8 = _mm256_set1_ps(scale * LOG2E);  // exp(a) = 2^(a log2 e)
  for (int r = 0; r < ROWS; ++r) {
    float* row = sc.s.data() + r * width;
    float top;
    if (full) {
      top = reduce_max(sc.rowmax[r]);
    } else {
      for (int j = j0; j < lo[r]; ++j) row[j - j0] = -INFINITY;
      for (int j = std::max(j0, hi[r]); j < j1; ++j) row[j - j0] = -INFINITY;
      __m256 m = _mm256_set1_ps(-INFINITY);
      for (int j = 0; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(row + j));
      top = reduce_max(m);
      for (int j = n & ~7; j < n; ++j) top = std::max(top, row[j]);
    }
    const __m256 m = _mm256_mul_ps(_mm256_set1_ps(top), sc8);  // as the AVX-512 kernel scales it
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
      const __m256 e0 = exp2_ps(_mm256_fmsub_ps(_mm256_loadu_ps(row + j), sc8, m));
      const __m256 e1 = exp2_ps(_mm256_fmsub_ps(_mm256_loadu_ps(row + j + 8), sc8, m));
      sum0 = _mm256_add_ps(sum0, e0), sum1 = _mm256_add_ps(sum1, e1);
      _mm256_storeu_ps(row + j, e0), _mm256_storeu_ps(row + j + 8, e1);
    }
    for (; j < n; j += 8) {
      const __m256 take = _mm256_castsi256_ps(first_lanes(std::min(8, n - j)));
      const __m256 e = _mm256_and_ps(exp2_ps(_mm256_fmsub_ps(_mm256_loadu_ps(row + j), sc8, m)), take);
      sum0 = _mm256_add_ps(sum0, e);
      _mm256_storeu_ps(row + j, e);
    }
    sc.inv[r] = 1.0f / reduce_add(_mm256_add_ps(sum0, sum1));
  }
}

// `rows` output rows = probabilities (ROWS rows of sc.s) x V over keys [j0, j1), scaled by 1 / sum, for NC vectors of
// 8 head dims from c0. Every loop bound but the key loop is a constant: accumulators stay in registers.
template <int NC, typename T>
inline void weighted_values_part(const Head<T>& h, const Scratch& sc, int width, int i, int rows, int j0, int j1,
                                 int c0) {
  __m256 acc[ROWS][NC];
  zero(acc);
  const float* vrow = h.vf + j0 * h.vf_stride + c0;
  const float* p = sc.s.data();
  for (int j = 0; j < j1 - j0; ++j, vrow += h.vf_stride) {
    __m256 va[NC];
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) va[c] = _mm256_loadu_ps(vrow + 8 * c);
    _Pragma("GCC unroll 16")
    for (int r = 0; r < ROWS; ++r) {
      const __m256 pr = _mm256_broadcast_ss(p + r * width + j);
      _Pragma("GCC unroll 16")
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_fmadd_ps(pr, va[c], acc[r][c]);
    }
  }
  alignas(32) float tmp[ROWS][NC][8];  // constant indices only: a runtime row index would keep acc in memory
  _Pragma("GCC unroll 16")
  for (int r = 0; r < ROWS; ++r)
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) _mm256_store_ps(tmp[r][c], _mm256_mul_ps(acc[r][c], _mm256_set1_ps(sc.inv[r])));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < NC; ++c) store8(h.out + (i + r) * h.os + c0 + 8 * c, _mm256_load_ps(tmp[r][c]));
}

struct Fp32Avx2 {  // fp32 FMAs on fp32 or (widened) bf16 rows, 8 lanes
  static constexpr int kRows = ROWS, kKeys = KEYS;
  template <typename T>
  static void pack(Head<T>& h, Scratch& sc, int D, int last, int width) { pack_keys(h, sc, D, last, width); }
  template <typename T>
  static void scores(const Head<T>& h, Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    ::scores(h, sc, width, D, i, rows, j0, j1);
  }
  static void softmax(Scratch& sc, int width, int j0, int j1, const int* lo, const int* hi, float scale) {
    const bool full = rows_see_every_key<ROWS>(j0, lo, hi);
    ::softmax(sc, width, j0, full ? hi[ROWS - 1] : j1, lo, hi, scale, full);
  }
  template <typename T>
  static void weighted_values(const Head<T>& h, const Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    int c0 = 0;
    for (; c0 + DIMS <= D; c0 += DIMS) weighted_values_part<2>(h, sc, width, i, rows, j0, j1, c0);
    if (c0 < D) weighted_values_part<1>(h, sc, width, i, rows, j0, j1, c0);
  }
};

}  // namespace

at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& cu, bool causal, int64_t window, double scale,
                            const std::vector<int64_t>& cu_k, const c10::optional<at::Tensor>& bias) {
  return attend_float<Fp32Avx2, Scratch>(q, k, v, cu, causal, window, scale, cu_k, 8, bias);  // varlen_items.h, D % 8
}
