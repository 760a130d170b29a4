// The Python bindings every build of the module shares (define_kernels): included only by the module files
// (module_avx512.cpp, avx2/module_avx2.cpp). torch/python.h (pybind11 and its casters for tensors), not
// torch/extension.h, which adds all of torch's C++ API: ~35 s of -O3 compile per file against ~22 s.
#pragma once
#include <pybind11/stl.h>
#include <torch/python.h>

#include <vector>

#include "rows_api.h"

namespace wde {

// The row kernels and the fp32 attention (fp32 arithmetic, bf16 rows widened), as every build binds them;
// attention_doc names the build's ISA.
inline void define_kernels(pybind11::module& m, const char* attention_doc) {
  namespace py = pybind11;
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
        py::arg("acc"), py::arg("scales"), py::arg("bias"), py::arg("residual"), py::arg("bfloat16"),
        py::call_guard<py::gil_scoped_release>());
  m.def("layer_norm", &layer_norm, "LayerNorm of fp32/bf16 rows (weight and bias per column), in the rows' dtype",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps"), py::call_guard<py::gil_scoped_release>());
  m.def("varlen_attention", &varlen_attention, attention_doc,
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens"), py::arg("causal"), py::arg("window"),
        py::arg("scale"), py::arg("cu_seqlens_k") = std::vector<int64_t>{}, py::arg("bias") = py::none(),
        py::call_guard<py::gil_scoped_release>());
}

}  // namespace wde
