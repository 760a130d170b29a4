"""wde-cpu-kernels: ``cpu_varlen``, wde's varlen attention kernel for CPU inference (AVX-512, or AVX2 where the CPU
has no AVX-512), int8 linear layers, and the core's CPU policy."""
