"""The compiled trace reader (stepscope.trace._fastread, C++, with the vendored simdjson); everything else
about the package is in pyproject.toml. The extension is optional: where it does not build (no C++ compiler,
an unusual platform) the package installs without it and reads traces with msgspec (trace/fastread.py)."""

from setuptools import Extension, setup

CSRC = "trainer/trace/csrc"

setup(ext_modules=[Extension(
    "stepscope.trace._fastread",
    sources=[f"{CSRC}/fastread.cpp", f"{CSRC}/simdjson/simdjson.cpp"],
    include_dirs=[CSRC],
    language="c++",
    # simdjson picks its SIMD kernels at run time (haswell, westmere, ... or its portable fallback), so the
    # build needs no -march; errors are returned as codes, never thrown through the interpreter
    define_macros=[("SIMDJSON_EXCEPTIONS", "0")],
    extra_compile_args=["-O3", "-std=c++17"],
    optional=True,  # a failed build is a warning, not a failed install
)])
