"""wde-cpu-kernels: ``cpu_varlen``, wde's AVX-512 varlen attention kernel for CPU inference."""
