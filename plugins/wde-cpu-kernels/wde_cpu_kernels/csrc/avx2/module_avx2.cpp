// wde_cpu_kernels._varlen_avx2's Python bindings: the row kernels and fp32 attention every build binds (bindings.h).
// The only file of the module that includes torch's Python headers (bindings.h); the kernels' files take aten.h.
#include "bindings.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  wde::define_kernels(m, "Varlen attention over packed sequences (AVX2)");
}
