// wde_cpu_kernels._varlen's Python bindings (AVX-512): the row kernels and fp32 attention every build binds
// (bindings.h), and the bf16-product attention where the compiler has AVX512-BF16. The only file of the module that
// includes torch's Python headers (bindings.h): the kernels' files take ATen's headers alone (aten.h).
#include "bindings.h"

#ifdef __AVX512BF16__
at::Tensor varlen_attention_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<int64_t>& cu, bool causal, int64_t window, double scale, bool amx,
                                 const std::vector<int64_t>& cu_k);
bool amx_available();
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  wde::define_kernels(m, "Varlen attention over packed sequences (AVX-512)");
#ifdef __AVX512BF16__
  m.def("varlen_attention_bf16", &varlen_attention_bf16, "The same for bfloat16 (AVX512-BF16, or AMX tiles)",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens"), py::arg("causal"), py::arg("window"),
        py::arg("scale"), py::arg("amx") = true, py::arg("cu_seqlens_k") = std::vector<int64_t>{},
        py::call_guard<py::gil_scoped_release>());
  m.def("amx_available", &amx_available, "Whether the CPU has AMX-BF16 and Linux grants its tile state");
#endif
}
