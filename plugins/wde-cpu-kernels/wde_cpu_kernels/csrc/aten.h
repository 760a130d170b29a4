// The ATen headers the kernels need (tensors and their methods, at::empty, at::parallel_for, TORCH_CHECK, bfloat16),
// in place of torch/extension.h (pybind11 and all of torch's C++ API: ~35 s of -O3 compile per file, these ~2.5 s).
// Only the module files (module_avx512.cpp, avx2/module_avx2.cpp) include torch's Python headers (bindings.h).
#pragma once
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>
