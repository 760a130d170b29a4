// What every varlen attention kernel shares, whatever its ISA (AVX-512: varlen_common.h; AVX2:
// varlen_attention_avx2.cpp): the keys a query row sees, the driver over one work item's query rows, the rows of q,
// k, v and the output of one (sequence, head) in float or bf16, the work items spread over torch's threads, and the
// fp32-arithmetic kernels' entry point (attend_float).
#pragma once
#include "aten.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace wde {

constexpr int QUERY_BLOCK = 128;  // query rows per work item

// One (sequence, head) of T (float or c10::BFloat16) rows for the kernels with fp32 arithmetic: q, k, v and out at a
// stride; kt (K transposed, kt_stride floats per head dim) and vf (V as fp32 rows vf_stride apart: v itself for fp32)
// are set as the keys are packed; bias (or null): the head's position bias over the score's scale by key - query
// offset, bias[j - i] for query row i and key j (OffsetBias).
template <typename T>
struct FloatHead {
  const T* q; const T* k; const T* v; T* out;
  int64_t qs, ks, vs, os;
  const float* kt = nullptr;
  int64_t kt_stride = 0;
  const float* vf = nullptr;
  int64_t vf_stride = 0;
  const float* bias = nullptr;
};

// A position bias, described by the bias of key - query offsets -m .. m per head (float [heads, 2m + 1], the same
// past m: wde_core's PositionBias.by_offset), laid out for every offset a batch's kernels read: row h holds
// bias / scale (the kernels add it to the raw scores, which the softmax scales) from offset -center to
// width - center - 1; center = the longest sequence's keys, so that query rows and the keys of score blocks rounded
// up to 64 stay inside.
struct OffsetBias {
  std::vector<float> rows;
  int64_t width = 0, center = 0;
  const float* head(int h) const { return rows.empty() ? nullptr : rows.data() + h * width + center; }
};

inline OffsetBias offset_bias(const c10::optional<at::Tensor>& bias, int heads, const std::vector<int64_t>& ck,
                              float scale) {
  OffsetBias out;
  if (!bias.has_value()) return out;
  TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->dim() == 2 && bias->size(0) == heads &&
              bias->size(1) % 2 == 1 && bias->is_contiguous(), "bias must be contiguous float32 [heads, 2m + 1]");
  const int64_t m = bias->size(1) / 2;
  for (size_t s = 0; s + 1 < ck.size(); ++s) out.center = std::max(out.center, ck[s + 1] - ck[s]);
  out.width = 2 * out.center + 64;
  out.rows.resize(static_cast<size_t>(heads) * out.width);
  const float* by_offset = bias->data_ptr<float>();
  for (int h = 0; h < heads; ++h)
    for (int64_t x = 0; x < out.width; ++x)
      out.rows[h * out.width + x] = by_offset[h * (2 * m + 1) + std::clamp(x - out.center, -m, m) + m] / scale;
  return out;
}

// The R query rows of the register block at row i (q rows `stride` apart); rows past `rows` repeat the last.
template <typename T, int R>
__attribute__((always_inline)) inline void block_rows(const T* q, int64_t stride, int i, int rows, const T* (&out)[R]) {
  _Pragma("GCC unroll 16")
  for (int r = 0; r < R; ++r) out[r] = q + std::min(i + r, i + rows - 1) * stride;
}

// Each register block row's position bias by key (brow[r][j]: row i + r's, rows past `rows` repeating the last), or
// all null where the head has none (FloatHead::bias).
template <int R>
inline void block_bias(const float* bias, int i, int rows, const float* (&brow)[R]) {
  for (int r = 0; r < R; ++r) brow[r] = bias == nullptr ? nullptr : bias - (i + std::min(r, rows - 1));
}

// Keys row i may see: [lo, hi).
inline void key_range(int i, int L, bool causal, int window, int* lo, int* hi) {
  *lo = window >= 0 ? std::max(0, i - window) : 0;
  *hi = causal ? i + 1 : (window >= 0 ? std::min(L, i + window + 1) : L);
}

// Whether each of a register block's R rows sees every key the block scored, [j0, the last row's end): no causal
// or window edge inside it (every encoder batch), so the softmax takes the one-pass path on the maxima already kept.
template <int R>
inline bool rows_see_every_key(int j0, const int* lo, const int* hi) {
  bool full = true;
  for (int r = 0; r < R; ++r) full = full && lo[r] <= j0 && hi[r] == hi[R - 1];
  return full;
}

// Query rows [row0, row1) of one head of a sequence of L tokens; `Ops` packs the keys (and values), computes
// scores, turns the block's scores into probabilities and sums the values (one implementation per dtype and ISA),
// Ops::kRows query rows at a time, with room for Ops::kKeys keys past the last multiple of 16 in each score row.
template <typename Ops, typename Head, typename Scratch>
void attend_rows(Head& h, int L, int D, int row0, int row1, bool causal, int window, float scale, Scratch& sc) {
  constexpr int ROWS = Ops::kRows;  // query rows per register block
  const int width = ((L + 15) & ~15) + Ops::kKeys;
  int lo, last;
  key_range(row1 - 1, L, causal, window, &lo, &last);
  Ops::pack(h, sc, D, last, width);
  sc.s.resize(static_cast<size_t>(ROWS) * width);
  sc.inv.resize(ROWS);
  for (int i = row0; i < row1; i += ROWS) {
    const int rows = std::min(ROWS, row1 - i);
    int j0, j1, hi;
    key_range(i, L, causal, window, &j0, &hi);
    key_range(i + rows - 1, L, causal, window, &lo, &j1);
    j0 &= ~15;
    const int jend = j0 + ((j1 - j0 + 15) & ~15);
    Ops::scores(h, sc, width, D, i, rows, j0, j1);
    int los[ROWS], his[ROWS];
    for (int r = 0; r < ROWS; ++r)  // rows past `rows` repeat the last row: computed, never stored
      key_range(i + std::min(r, rows - 1), L, causal, window, &los[r], &his[r]);
    Ops::softmax(sc, width, j0, jend, los, his, scale);
    Ops::weighted_values(h, sc, width, D, i, rows, j0, j1);
  }
}

// Checks boundaries: cu_q over the query rows, cu_k (empty: cu_q) over the key rows, one sequence each; a sequence
// has at least as many keys as queries, its queries aligned to its last keys (a shared prefix's keys come first).
inline const std::vector<int64_t>& key_bounds(const std::vector<int64_t>& cu_q, const std::vector<int64_t>& cu_k,
                                              int64_t q_rows, int64_t k_rows) {
  const std::vector<int64_t>& ck = cu_k.empty() ? cu_q : cu_k;
  TORCH_CHECK(!cu_q.empty() && ck.size() == cu_q.size() && cu_q.front() == 0 && ck.front() == 0 &&
              cu_q.back() == q_rows && ck.back() == k_rows, "cu_seqlens do not match the rows of q and k");
  for (size_t s = 0; s + 1 < cu_q.size(); ++s) {
    const int64_t queries = cu_q[s + 1] - cu_q[s], keys = ck[s + 1] - ck[s];
    TORCH_CHECK(queries >= 0 && keys >= queries && cu_q[s] >= keys - queries,
                "a sequence has fewer keys than queries, or its queries start before row keys - queries");
  }
  return ck;
}

// Calls run(row of query 0, first key row, keys L, head, kv head, first row, last row, scratch) for every (sequence,
// head, block of QUERY_BLOCK query rows), spread over torch's threads. Each thread takes the next item as it finishes
// one: a static split gave a thread every first block of a sequence's heads and the other every shorter second
// block (a sequence of 200 tokens: 128 rows against 72). Rows count in the sequence's keys: queries are its last
// cu_q[s + 1] - cu_q[s] rows, so q row r of the sequence is packed row cu_q[s] - (L - queries) + r (run gets that
// base, never below 0: key_bounds checked it).
template <typename Scratch, typename Run>
void for_each_item(const std::vector<int64_t>& cu_q, const std::vector<int64_t>& ck, int heads, int group, Run run) {
  std::vector<std::array<int, 3>> items;  // (sequence, head, first query row)
  for (size_t s = 0; s + 1 < cu_q.size(); ++s)
    for (int h = 0; h < heads; ++h)
      for (int64_t r = (ck[s + 1] - ck[s]) - (cu_q[s + 1] - cu_q[s]); r < ck[s + 1] - ck[s]; r += QUERY_BLOCK)
        items.push_back({int(s), h, int(r)});
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), static_cast<int64_t>(items.size()));
  std::atomic<size_t> next{0};
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    Scratch sc;
    for (size_t n = next.fetch_add(1, std::memory_order_relaxed); n < items.size();
         n = next.fetch_add(1, std::memory_order_relaxed)) {
      const auto [s, hd, row0] = items[n];
      const int L = static_cast<int>(ck[s + 1] - ck[s]);
      const int64_t q0 = cu_q[s] - (L - (cu_q[s + 1] - cu_q[s]));
      run(q0, ck[s], L, hd, hd / group, row0, std::min(L, row0 + QUERY_BLOCK), sc);
    }
  });
}

// Every (sequence, head, block of query rows) of float or bf16 q, k, v attended by the fp32-arithmetic driver Ops over
// a FloatHead<T>, into out.
template <typename Ops, typename Scratch, typename T>
void attend_all(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                const std::vector<int64_t>& cu, const std::vector<int64_t>& ck, bool causal, int window, float scale,
                const OffsetBias& bias) {
  const int heads = q.size(1), D = q.size(2);
  for_each_item<Scratch>(cu, ck, heads, heads / v.size(1), [&](int64_t q0, int64_t k0, int L, int hd, int kvh, int row0,
                                                               int row1, Scratch& sc) {
    FloatHead<T> h{q.data_ptr<T>() + q0 * q.stride(0) + hd * q.stride(1),
                   k.data_ptr<T>() + k0 * k.stride(0) + kvh * k.stride(1),
                   v.data_ptr<T>() + k0 * v.stride(0) + kvh * v.stride(1),
                   out.data_ptr<T>() + q0 * out.stride(0) + hd * out.stride(1),
                   q.stride(0), k.stride(0), v.stride(0), out.stride(0)};
    h.bias = bias.head(hd);
    attend_rows<Ops>(h, L, D, row0, row1, causal, window, scale, sc);
  });
}

// varlen_attention of an fp32-arithmetic kernel (each ISA's): q [T, H, D], k and v [Tk, Hkv, D] (head_dim contiguous
// and a multiple of dim_multiple), all float32 or all bfloat16 (widened: fp32 arithmetic, the output rounded to
// bf16); window < 0 means none. Returns out [T, H, D] in the inputs' dtype. cu_k (empty: cu the same) bounds each
// sequence's keys when they are not its own rows (shared_prefix.py); bias (optional): the position bias of key - query
// offsets -m .. m per head, added to the scaled scores (OffsetBias).
template <typename Ops, typename Scratch>
at::Tensor attend_float(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::vector<int64_t>& cu,
                        bool causal, int64_t window, double scale, const std::vector<int64_t>& cu_k, int dim_multiple,
                        const c10::optional<at::Tensor>& bias) {
  const auto dtype = q.scalar_type();
  TORCH_CHECK((dtype == at::kFloat || dtype == at::kBFloat16) && k.scalar_type() == dtype && v.scalar_type() == dtype,
              "varlen_attention takes float32 or bfloat16 (q, k and v alike)");
  TORCH_CHECK(q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1, "head_dim must be contiguous");
  TORCH_CHECK(q.size(2) % dim_multiple == 0 && q.size(1) % v.size(1) == 0,
              "head_dim % ", dim_multiple, " and heads % kv heads must be 0");
  const std::vector<int64_t>& ck = key_bounds(cu, cu_k, q.size(0), k.size(0));
  at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2)}, q.options());
  const OffsetBias offsets = offset_bias(bias, q.size(1), ck, static_cast<float>(scale));
  if (dtype == at::kFloat)
    attend_all<Ops, Scratch, float>(q, k, v, out, cu, ck, causal, static_cast<int>(window), static_cast<float>(scale),
                                    offsets);
  else
    attend_all<Ops, Scratch, c10::BFloat16>(q, k, v, out, cu, ck, causal, static_cast<int>(window),
                                            static_cast<float>(scale), offsets);
  return out;
}

}  // namespace wde
