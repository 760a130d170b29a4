// Varlen attention over packed sequences on an AVX-512 CPU: one (sequence, head, block of query rows)
// per work item, scores and softmax kept in a small per-thread buffer (no padded block, no mask tensor,
// no [heads, L, L] scores in memory). Inputs are fp32 [tokens, heads, head_dim] views with a contiguous last
// dimension; K is transposed per item into a small buffer. The parts shared with the bf16
// kernel are in varlen_common.h; setup.py compiles both into wde_cpu_kernels._varlen at install.
#include <torch/extension.h>

#include "varlen_common.h"

namespace {

using namespace wde;

struct Scratch {
  std::vector<float> s, inv, kt;  // scores / probabilities [ROWS][width], 1 / sum per row, K^T
  __m512 rowmax[ROWS];            // each register block row's running max of its scores
};

// One (sequence, head): q, k and v rows at a stride; kt (K transposed, kt_stride floats per head dim)
// is packed by pack_keys.
struct Head {
  const float* q; const float* k; const float* v; float* out;
  int64_t qs, ks, vs, os;
  const float* kt = nullptr;
  int64_t kt_stride = 0;
};

// K^T of keys [0, last) into sc.kt ([D][width], zero past `last` up to the next 16: the scores read no further), 16
// keys x 16 head dims at a time by transpose16. V is read in place: copying its rows side by side measured no faster.
inline void pack_keys(Head& h, Scratch& sc, int D, int last, int width) {
  sc.kt.resize(static_cast<size_t>(D) * width);
  for (int j = 0; j < last; j += 16) {
    const int keys = std::min(16, last - j);
    for (int d0 = 0; d0 < D; d0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < keys ? _mm512_loadu_si512(h.k + (j + i) * h.ks + d0) : _mm512_setzero_si512();
      transpose16(r);
      for (int c = 0; c < 16; ++c) _mm512_storeu_si512(sc.kt.data() + static_cast<size_t>(d0 + c) * width + j, r[c]);
    }
  }
  h.kt = sc.kt.data();
  h.kt_stride = width;
}

// NC vectors of 16 keys from j of the register block's rows' scores (row r to s + r * width + j - j0), the last
// vector's keys up to j1 (K^T is zero past them); each row's running max of its scores kept in rowmax.
template <int NC>
inline void scores_part(const Head& h, const float* const (&qrow)[ROWS], Scratch& sc, int width, int D, int j, int j0,
                        int j1) {
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
  store_scores_and_max<NC>(acc, sc.s.data() + (j - j0), width, j1 - j, sc.rowmax);
}

// Scores of ROWS query rows from `i` (rows past `rows` repeat the last) against keys [j0, j1), j0 a multiple of 16,
// in blocks of KEYS; the last block only as many vectors of 16 as it needs (short sequences are most of an embedding
// batch: 43 keys take 3 vectors, not 4).
inline void scores(const Head& h, Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
  const float* qrow[ROWS];
  block_rows(h.q, h.qs, i, rows, qrow);
  for (int r = 0; r < ROWS; ++r) sc.rowmax[r] = _mm512_set1_ps(-INFINITY);
  int j = j0;
  for (; j + KEYS <= j1; j += KEYS) scores_part<4>(h, qrow, sc, width, D, j, j0, j1);
  switch ((j1 - j + 15) / 16) {
    case 4: scores_part<4>(h, qrow, sc, width, D, j, j0, j1); break;
    case 3: scores_part<3>(h, qrow, sc, width, D, j, j0, j1); break;
    case 2: scores_part<2>(h, qrow, sc, width, D, j, j0, j1); break;
    case 1: scores_part<1>(h, qrow, sc, width, D, j, j0, j1); break;
    default: break;
  }
}

// `rows` output rows = probabilities (ROWS rows of sc.s) x V over keys [j0, j1), scaled by 1 / sum, for NC
// vectors of head_dim from c0. Every loop bound but the key loop is a constant: accumulators stay in registers.
template <int NC>
inline void weighted_values_part(const Head& h, const Scratch& sc, int width, int i, int rows, int j0, int j1, int c0) {
  __m512 acc[ROWS][NC];
  zero(acc);
  const float* vrow = h.v + j0 * h.vs + c0;
  const float* pcol = sc.s.data();
  const float* const pend = pcol + (j1 - j0);
  // two keys a step: each row's probability pointer is made once for both (a row offset per key, reloaded from
  // the stack where the registers run out, was as many loads as the products had)
  for (; pcol + 1 < pend; pcol += 2, vrow += 2 * h.vs) {
    __m512 va[NC], vb[NC];
    _Pragma("GCC unroll 16")
    for (int c = 0; c < NC; ++c) {
      va[c] = _mm512_loadu_ps(vrow + 16 * c);
      vb[c] = _mm512_loadu_ps(vrow + h.vs + 16 * c);
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
  for (int r = 0; r < rows; ++r) std::copy(tmp[r][0], tmp[r][0] + 16 * NC, h.out + (i + r) * h.os + c0);
}

inline void weighted_values(const Head& h, const Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
  int c0 = 0;
  for (; c0 + 64 <= D; c0 += 64) weighted_values_part<4>(h, sc, width, i, rows, j0, j1, c0);
  switch ((D - c0) / 16) {
    case 3: weighted_values_part<3>(h, sc, width, i, rows, j0, j1, c0); break;
    case 2: weighted_values_part<2>(h, sc, width, i, rows, j0, j1, c0); break;
    case 1: weighted_values_part<1>(h, sc, width, i, rows, j0, j1, c0); break;
    default: break;
  }
}

struct Fp32 {
  static void pack(Head& h, Scratch& sc, int D, int last, int width) { pack_keys(h, sc, D, last, width); }
  static void scores(const Head& h, Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    ::scores(h, sc, width, D, i, rows, j0, j1);
  }
  // Rows that each see every key the block scored (no causal or window edge inside it: every encoder batch) take
  // the one-pass softmax; the fp32 exps stay in place.
  static void softmax(Scratch& sc, int width, int j0, int j1, const int* lo, const int* hi, float scale) {
    bool full = true;
    for (int r = 0; r < ROWS; ++r) full = full && lo[r] <= j0 && hi[r] == hi[ROWS - 1];
    if (full) {
      softmax_full_rows<ROWS>(sc.s.data(), width, j0, hi[ROWS - 1], sc.rowmax, scale, sc.inv.data());
      return;
    }
    softmax_rows<ROWS>(sc.s.data(), width, j0, j1, lo, hi, scale, sc.inv.data());
  }
  static void weighted_values(const Head& h, const Scratch& sc, int width, int D, int i, int rows, int j0, int j1) {
    ::weighted_values(h, sc, width, D, i, rows, j0, j1);
  }
};

}  // namespace

// q [T, H, D], k and v [Tk, Hkv, D] (head_dim contiguous), float32; window < 0 means none. Returns out [T, H, D].
// cu_k (empty: cu the same) bounds each sequence's keys when they are not its own rows (shared_prefix.py).
at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& cu, bool causal, int64_t window, double scale,
                            const std::vector<int64_t>& cu_k) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "varlen_attention takes float32");
  TORCH_CHECK(q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1, "head_dim must be contiguous");
  TORCH_CHECK(q.size(2) % 16 == 0 && q.size(1) % v.size(1) == 0, "head_dim % 16 and heads % kv heads must be 0");
  const int heads = q.size(1), D = q.size(2);
  const std::vector<int64_t>& ck = key_bounds(cu, cu_k, q.size(0), k.size(0));
  at::Tensor out = at::empty({q.size(0), heads, D}, q.options());
  for_each_item<Scratch>(cu, ck, heads, heads / v.size(1), [&](int64_t q0, int64_t k0, int L, int hd, int kvh, int row0,
                                                               int row1, Scratch& sc) {
    Head h{q.data_ptr<float>() + q0 * q.stride(0) + hd * q.stride(1),
           k.data_ptr<float>() + k0 * k.stride(0) + kvh * k.stride(1),
           v.data_ptr<float>() + k0 * v.stride(0) + kvh * v.stride(1),
           out.data_ptr<float>() + q0 * out.stride(0) + hd * out.stride(1),
           q.stride(0), k.stride(0), v.stride(0), out.stride(0)};
    attend_rows<Fp32>(h, L, D, row0, row1, causal, static_cast<int>(window), static_cast<float>(scale), sc);
  });
  return out;
}

#ifdef __AVX512BF16__
at::Tensor varlen_attention_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<int64_t>& cu, bool causal, int64_t window, double scale, bool amx,
                                 const std::vector<int64_t>& cu_k);
bool amx_available();
#endif

at::Tensor row_absmax(const at::Tensor& x);                   // quantize.cpp
at::Tensor quantize_uint8(const at::Tensor& x, double scale, bool int8, int64_t row_multiple);  // quantize.cpp
std::tuple<at::Tensor, at::Tensor> quantize_rows_uint8(const at::Tensor& x, bool int8,
                                                       int64_t row_multiple);  // quantize.cpp
std::tuple<at::Tensor, double, at::Tensor> quantize_batch_uint8(const at::Tensor& x, double factor, bool int8,
                                                                int64_t row_multiple);  // quantize.cpp
at::Tensor dequantize_rows(const at::Tensor& acc, const at::Tensor& scales, const c10::optional<at::Tensor>& bias,
                           const c10::optional<at::Tensor>& residual, bool bfloat16);  // quantize.cpp
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);  // layer_norm.cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("row_absmax", &row_absmax, "Each row's largest magnitude (float32 [rows])", py::arg("x"),
        py::call_guard<py::gil_scoped_release>());
  m.def("quantize_uint8", &quantize_uint8, "Symmetric int8 of fp32/bf16 rows with one scale, stored + 128 (uint8), "
        "or as int8 with int8=True; rows padded with zeros to a multiple of row_multiple",
        py::arg("x"), py::arg("scale"), py::arg("int8") = false, py::arg("row_multiple") = 1,
        py::call_guard<py::gil_scoped_release>());
  m.def("quantize_batch_uint8", &quantize_batch_uint8, "One scale for the rows at most `factor` times the median "
        "row's largest magnitude, those rows' indices (outliers), and all rows quantized with it (+ 128, uint8; "
        "padded with zero rows to a multiple of row_multiple)",
        py::arg("x"), py::arg("factor"), py::arg("int8") = false, py::arg("row_multiple") = 1,
        py::call_guard<py::gil_scoped_release>());
  m.def("quantize_rows_uint8", &quantize_rows_uint8, "Symmetric int8 of each row with its own scale, + 128 (padded "
        "with zero rows to a multiple of row_multiple); and the scales of x's rows", py::arg("x"),
        py::arg("int8") = false, py::arg("row_multiple") = 1, py::call_guard<py::gil_scoped_release>());
  m.def("dequantize_rows", &dequantize_rows, "acc * row scale + bias + residual, as float32 or bfloat16",
        py::arg("acc"),
        py::arg("scales"), py::arg("bias"), py::arg("residual"), py::arg("bfloat16"),
        py::call_guard<py::gil_scoped_release>());
  m.def("layer_norm", &layer_norm, "LayerNorm of fp32/bf16 rows (weight and bias per column), in the rows' dtype",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps"), py::call_guard<py::gil_scoped_release>());
  m.def("varlen_attention", &varlen_attention, "Varlen attention over packed sequences (AVX-512)",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens"), py::arg("causal"), py::arg("window"),
        py::arg("scale"), py::arg("cu_seqlens_k") = std::vector<int64_t>{}, py::call_guard<py::gil_scoped_release>());
#ifdef __AVX512BF16__
  m.def("varlen_attention_bf16", &varlen_attention_bf16, "The same for bfloat16 (AVX512-BF16, or AMX tiles)",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens"), py::arg("causal"), py::arg("window"),
        py::arg("scale"), py::arg("amx") = true, py::arg("cu_seqlens_k") = std::vector<int64_t>{},
        py::call_guard<py::gil_scoped_release>());
  m.def("amx_available", &amx_available, "Whether the CPU has AMX-BF16 and Linux grants its tile state");
#endif
}
