"""Builds wde-cpu-kernels' AVX-512 module (``_varlen``, every ``csrc/*.cpp``) with AVX-512 emulated in portable code
(SIMDe, through this directory's ``immintrin.h``), so that a CPU without AVX-512 can run the AVX-512 kernels' tests
(``pytest_plugin.py``). Correctness only: the emulation runs 10-100x slower and says nothing of speed.

    python build.py OUT_DIR    # writes OUT_DIR/_varlen.so against this Python's torch (about 75 s on 2 cores)

Needs a C++ compiler and SIMDe's headers (Debian: ``apt-get install libsimde-dev``; elsewhere ``SIMDE_INCLUDE=dir``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch.utils.cpp_extension import include_paths

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "wde_cpu_kernels" / "csrc"
# AVX2 + FMA underneath (SIMDe builds its 512-bit vectors from them where it can); -O1 keeps the compile short
FLAGS = ["-O1", "-fopenmp", "-mavx2", "-mfma", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-std=c++20", "-Wno-psabi",
         "-DTORCH_EXTENSION_NAME=_varlen", "-DTORCH_API_INCLUDE_EXTENSION_H",
         f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"]


def simde_include() -> str:
    """The directory holding ``simde/x86/avx512.h``; exits with the way to get it where there is none."""
    root = os.environ.get("SIMDE_INCLUDE", "/usr/include")
    if not (Path(root) / "simde" / "x86" / "avx512.h").is_file():
        sys.exit(f"SIMDe's headers are not under {root}: apt-get install libsimde-dev, or set SIMDE_INCLUDE")
    return root


def build(out: Path) -> Path:
    """Compile each AVX-512 source against the shim and link ``out/_varlen.so``."""
    out.mkdir(parents=True, exist_ok=True)
    includes = [f"-I{HERE}", f"-I{simde_include()}", f"-I{CSRC}", f"-I{sysconfig.get_paths()['include']}",
                *(f"-I{path}" for path in include_paths())]
    sources = sorted(CSRC.glob("*.cpp"))

    def compile_one(source: Path) -> Path:
        obj = out / f"{source.stem}.o"
        subprocess.run([os.environ.get("CXX", "g++"), *FLAGS, *includes, "-c", str(source), "-o", str(obj)],
                       check=True)
        return obj

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_one, sources))
    library = out / "_varlen.so"
    torch_lib = Path(torch.__file__).parent / "lib"
    subprocess.run([os.environ.get("CXX", "g++"), "-shared", "-fopenmp", *map(str, objects), f"-L{torch_lib}",
                    "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-o", str(library)], check=True)
    return library


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "build-emulated-avx512")))
