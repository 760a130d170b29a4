"""Builds ``wde_cpu_kernels._varlen`` (csrc/) when the distribution is installed, against the torch in the build
environment: pip install --no-build-isolation ./plugins/wde-cpu-kernels builds against the torch already installed
(the ABI must match the torch that loads it); with build isolation, pip installs the torch pinned in pyproject.toml."""

import atexit
import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

CSRC = Path("wde_cpu_kernels") / "csrc"
# AVX-512 throughout, AVX512-BF16 for varlen_attention_bf16.cpp's pair dot products and AMX for
# varlen_attention_amx.cpp's tiles (the compiler emits AMX only where the source asks for it): the module is
# loaded on any x86-64 CPU and only called where the CPU has them (wde_cpu_kernels.attention checks before each use,
# the AMX path checks CPUID and asks Linux for the tile state). -fno-math-errno -fno-trapping-math let the
# quantizer's rounding loops vectorize.
AMX = ["-mamx-tile", "-mamx-bf16"]


def compiler_takes(flags: list[str]) -> bool:
    """Whether the C++ compiler accepts ``flags`` (gcc < 11 and clang < 12 have no AMX flags: without them
    varlen_attention_amx.cpp compiles its fallback and the AVX512-BF16 path serves every CPU)."""
    compiler = os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++"
    probe = subprocess.run([*shlex.split(compiler), *flags, "-x", "c++", "-E", "-"], input="", capture_output=True,
                           text=True, check=False)
    return probe.returncode == 0


# -g0: no debug information (Python's own flags ask for -g): the bindings file compiled in 29 s instead of 54
FLAGS = ["-O3", "-g0", "-fopenmp", "-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma", "-mavx512bf16",
         "-fno-math-errno", "-fno-trapping-math"] + (AMX if compiler_takes(AMX) else [])
# the same kernels in 8-lane vectors for CPUs with AVX2 and FMA but no AVX-512 (AMD Zen 1-3, Intel client cores and
# Xeons before Skylake-SP): wde_cpu_kernels._varlen_avx2, loaded where _varlen cannot run (csrc/avx2/)
AVX2_FLAGS = ["-O3", "-g0", "-fopenmp", "-mavx2", "-mfma", "-fno-math-errno", "-fno-trapping-math"]



class ParallelBuildExtension(BuildExtension.with_options(use_ninja=False)):
    """torch's BuildExtension without ninja, compiling the sources side by side (one compiler per core). Only each
    module's bindings file includes torch's Python headers (~30 s of -O3; the kernels' files ATen's, 6-13 s each)."""

    def build_extensions(self) -> None:
        compiler = self.compiler

        def compile_in_parallel(sources, output_dir=None, macros=None, include_dirs=None, debug=False,
                                extra_preargs=None, extra_postargs=None, depends=None):
            """distutils' CCompiler.compile, with its loop over the objects run on a thread pool."""
            macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
            to_build = [obj for obj in objects if obj in build]
            with ThreadPoolExecutor(max(1, min(len(to_build), os.cpu_count() or 1))) as pool:
                for _ in pool.map(lambda obj: compiler._compile(obj, *build[obj], cc_args, extra_postargs, pp_opts),
                                  to_build):
                    pass
            return objects

        compiler.compile = compile_in_parallel
        super().build_extensions()


# out of tree, as flit_core builds wde's other distributions: setuptools' build/ and *.egg-info go to a temporary
# directory, never into the checkout
OUT_OF_TREE = Path(tempfile.mkdtemp(prefix="wde-cpu-kernels-build-"))
atexit.register(shutil.rmtree, OUT_OF_TREE, ignore_errors=True)  # the wheel or metadata is out by then

setup(
    ext_modules=[CppExtension("wde_cpu_kernels._varlen",
                              [str(CSRC / name) for name in ("module_avx512.cpp", "varlen_attention.cpp",
                                                              "varlen_attention_bf16.cpp", "varlen_attention_amx.cpp",
                                                              "quantize.cpp", "layer_norm.cpp")],
                              include_dirs=[str(CSRC.resolve())], extra_compile_args=FLAGS,
                              extra_link_args=["-fopenmp"]),
                 CppExtension("wde_cpu_kernels._varlen_avx2",
                              [str(CSRC / "avx2" / name) for name in ("module_avx2.cpp", "varlen_attention_avx2.cpp",
                                                                        "rows_avx2.cpp")],
                              include_dirs=[str(CSRC.resolve())], extra_compile_args=AVX2_FLAGS,
                              extra_link_args=["-fopenmp"])],
    cmdclass={"build_ext": ParallelBuildExtension},
    # parallel: the two modules build side by side too, each compiling its files side by side
    options={"build": {"build_base": str(OUT_OF_TREE / "build")}, "egg_info": {"egg_base": str(OUT_OF_TREE)},
             "build_ext": {"parallel": os.cpu_count() or 1}},
)
