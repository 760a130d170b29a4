// The tensor-level row kernels, whatever the ISA (AVX-512: quantize.cpp, layer_norm.cpp; AVX2: avx2/rows_avx2.cpp):
// argument checks, outputs, the fp32/bf16 dispatch and the outlier search. `K` does the per-row work, each a template
// over the element type (float or c10::BFloat16): absmax_rows, quantize, quantize_per_row, dequantize_per_row and
// layer_norm_rows. The Python bindings every build of the module shares: bindings.h.
#pragma once
#include "aten.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

namespace wde::rows_api {

inline void check_rows(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "expected 2-D rows with a contiguous last dimension");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "expected float32 or bfloat16");
}

template <typename K>
void absmax_rows(const at::Tensor& x, float* out) {
  if (x.scalar_type() == at::kFloat)
    K::absmax_rows(x.data_ptr<float>(), x.size(0), x.size(1), x.stride(0), out);
  else
    K::absmax_rows(x.data_ptr<c10::BFloat16>(), x.size(0), x.size(1), x.stride(0), out);
}

template <typename K>
at::Tensor row_absmax(const at::Tensor& x) {
  check_rows(x);
  auto out = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  absmax_rows<K>(x, out.data_ptr<float>());
  return out;
}

// int8 activations (`int8`: oneDNN's AMX-INT8 kernels take them, with no zero point to compensate) or uint8 with zero
// point 128 (every int8 ISA): the output tensor and the byte that turns int8 into it. The output's rows are x's rounded
// up to a multiple of `row_multiple`, the padding rows all zero (the zero point): oneDNN builds a primitive for every
// new row count, so padded batches reuse the few it has built.
inline std::pair<at::Tensor, uint8_t> quantized_like(const at::Tensor& x, bool int8, int64_t row_multiple) {
  TORCH_CHECK(row_multiple >= 1, "row_multiple must be at least 1");
  const int64_t rows = x.size(0), padded = (rows + row_multiple - 1) / row_multiple * row_multiple;
  const uint8_t flip = int8 ? 0 : 0x80;
  at::Tensor out = at::empty({padded, x.size(1)}, x.options().dtype(int8 ? at::kChar : at::kByte));
  std::memset(static_cast<uint8_t*>(out.data_ptr()) + rows * x.size(1), flip, (padded - rows) * x.size(1));
  return {out, flip};
}

template <typename K>
at::Tensor quantize_uint8(const at::Tensor& x, double scale, bool int8, int64_t row_multiple) {
  check_rows(x);
  auto [out, flip] = quantized_like(x, int8, row_multiple);
  const float inv = static_cast<float>(1.0 / scale);
  auto* q = static_cast<uint8_t*>(out.data_ptr());
  if (x.scalar_type() == at::kFloat)
    K::quantize(x.data_ptr<float>(), x.size(0), x.size(1), x.stride(0), inv, flip, q);
  else
    K::quantize(x.data_ptr<c10::BFloat16>(), x.size(0), x.size(1), x.stride(0), inv, flip, q);
  return out;
}

// row_absmax, the outlier rows and the scale of the rest, and quantize_uint8 in one call: the scale is the largest
// magnitude of the rows at most `factor` times the median row's (torch.median's lower median) / 127, the outliers are
// the others (their indices, ascending), and every row is quantized with that scale (the outliers saturate).
template <typename K>
std::tuple<at::Tensor, double, at::Tensor> quantize_batch_uint8(const at::Tensor& x, double factor, bool int8,
                                                                int64_t row_multiple) {
  check_rows(x);
  const int64_t rows = x.size(0);
  TORCH_CHECK(rows > 0, "expected at least one row");
  std::vector<float> mags(rows);
  absmax_rows<K>(x, mags.data());
  std::vector<float> sorted(mags);
  std::nth_element(sorted.begin(), sorted.begin() + (rows - 1) / 2, sorted.end());
  const float limit = static_cast<float>(factor) * sorted[(rows - 1) / 2];
  std::vector<int64_t> outlying;
  float largest = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    if (mags[r] > limit) outlying.push_back(r);
    else largest = std::max(largest, mags[r]);
  }
  const double scale = std::max(static_cast<double>(largest), 1e-8) / 127.0;
  at::Tensor quantized = quantize_uint8<K>(x, scale, int8, row_multiple);
  at::Tensor outliers = at::empty({static_cast<int64_t>(outlying.size())}, x.options().dtype(at::kLong));
  std::copy(outlying.begin(), outlying.end(), outliers.data_ptr<int64_t>());
  return {quantized, scale, outliers};
}

template <typename K>
std::tuple<at::Tensor, at::Tensor> quantize_rows_uint8(const at::Tensor& x, bool int8, int64_t row_multiple) {
  check_rows(x);
  auto [out, flip] = quantized_like(x, int8, row_multiple);
  auto scales = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  auto* q = static_cast<uint8_t*>(out.data_ptr());
  if (x.scalar_type() == at::kFloat)
    K::quantize_per_row(x.data_ptr<float>(), x.size(0), x.size(1), x.stride(0), flip, q, scales.data_ptr<float>());
  else
    K::quantize_per_row(x.data_ptr<c10::BFloat16>(), x.size(0), x.size(1), x.stride(0), flip, q,
                        scales.data_ptr<float>());
  return {out, scales};
}

template <typename K>
at::Tensor dequantize_rows(const at::Tensor& acc, const at::Tensor& scales, const c10::optional<at::Tensor>& bias,
                           const c10::optional<at::Tensor>& residual, bool bfloat16) {
  TORCH_CHECK(acc.dim() == 2 && acc.is_contiguous() && acc.scalar_type() == at::kFloat, "expected float32 rows");
  const at::ScalarType dtype = bfloat16 ? at::kBFloat16 : at::kFloat;
  TORCH_CHECK(scales.is_contiguous() && scales.numel() == acc.size(0), "one float32 scale per row");
  const int64_t rows = acc.size(0), cols = acc.size(1);
  at::Tensor b = bias.has_value() ? bias->contiguous().to(at::kFloat) : at::Tensor();
  at::Tensor res = residual.has_value() ? residual->reshape({rows, cols}).contiguous().to(dtype) : at::Tensor();
  TORCH_CHECK(!b.defined() || b.numel() == cols, "one bias per column");
  auto y = at::empty({rows, cols}, acc.options().dtype(dtype));
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  if (dtype == at::kFloat)
    K::dequantize_per_row(acc.data_ptr<float>(), scales.data_ptr<float>(), bp,
                          res.defined() ? res.data_ptr<float>() : nullptr, rows, cols, y.data_ptr<float>());
  else
    K::dequantize_per_row(acc.data_ptr<float>(), scales.data_ptr<float>(), bp,
                          res.defined() ? res.data_ptr<c10::BFloat16>() : nullptr, rows, cols,
                          y.data_ptr<c10::BFloat16>());
  return y;
}

template <typename K>
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  check_rows(x);
  const int64_t rows = x.size(0), cols = x.size(1);
  TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "one weight and one bias per column");
  const at::Tensor w = weight.contiguous().to(at::kFloat), b = bias.contiguous().to(at::kFloat);
  auto y = at::empty({rows, cols}, x.options());
  if (x.scalar_type() == at::kFloat)
    K::layer_norm_rows(x.data_ptr<float>(), rows, cols, x.stride(0), w.data_ptr<float>(), b.data_ptr<float>(),
                       static_cast<float>(eps), y.data_ptr<float>());
  else
    K::layer_norm_rows(x.data_ptr<c10::BFloat16>(), rows, cols, x.stride(0), w.data_ptr<float>(), b.data_ptr<float>(),
                       static_cast<float>(eps), y.data_ptr<c10::BFloat16>());
  return y;
}

}  // namespace wde::rows_api

// The functions every build of the module defines (each in its own ISA's sources) and binds alike.
at::Tensor row_absmax(const at::Tensor& x);
at::Tensor quantize_uint8(const at::Tensor& x, double scale, bool int8, int64_t row_multiple);
std::tuple<at::Tensor, at::Tensor> quantize_rows_uint8(const at::Tensor& x, bool int8, int64_t row_multiple);
std::tuple<at::Tensor, double, at::Tensor> quantize_batch_uint8(const at::Tensor& x, double factor, bool int8,
                                                                int64_t row_multiple);
at::Tensor dequantize_rows(const at::Tensor& acc, const at::Tensor& scales, const c10::optional<at::Tensor>& bias,
                           const c10::optional<at::Tensor>& residual, bool bfloat16);
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);
at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& cu, bool causal, int64_t window, double scale,
                            const std::vector<int64_t>& cu_k, const c10::optional<at::Tensor>& bias);

// Defines the module's quantization functions (declared above) by rows_api's templates over K, once per build.
#define WDE_DEFINE_QUANTIZATION(K)                                                                                  \
  at::Tensor row_absmax(const at::Tensor& x) { return wde::rows_api::row_absmax<K>(x); }                           \
  at::Tensor quantize_uint8(const at::Tensor& x, double scale, bool int8, int64_t row_multiple) {                  \
    return wde::rows_api::quantize_uint8<K>(x, scale, int8, row_multiple);                                         \
  }                                                                                                                 \
  std::tuple<at::Tensor, double, at::Tensor> quantize_batch_uint8(const at::Tensor& x, double factor, bool int8,   \
                                                                  int64_t row_multiple) {                          \
    return wde::rows_api::quantize_batch_uint8<K>(x, factor, int8, row_multiple);                                  \
  }                                                                                                                 \
  std::tuple<at::Tensor, at::Tensor> quantize_rows_uint8(const at::Tensor& x, bool int8, int64_t row_multiple) {   \
    return wde::rows_api::quantize_rows_uint8<K>(x, int8, row_multiple);                                           \
  }                                                                                                                 \
  at::Tensor dequantize_rows(const at::Tensor& acc, const at::Tensor& scales, const c10::optional<at::Tensor>& bias, \
                             const c10::optional<at::Tensor>& residual, bool bfloat16) {                           \
    return wde::rows_api::dequantize_rows<K>(acc, scales, bias, residual, bfloat16);                               \
  }
