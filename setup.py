"""The compiled trace reader (stepscope.trace._fastread, C, with the vendored yyjson); everything else
about the package is in pyproject.toml. The extension is optional: where it does not build (no C compiler, an
unusual platform) the package installs without it and reads traces with msgspec (trace/fastread.py)."""

from setuptools import Extension, setup

CSRC = "trainer/trace/csrc"

setup(ext_modules=[Extension(
    "stepscope.trace._fastread",
    sources=[f"{CSRC}/fastread.c", f"{CSRC}/yyjson/yyjson.c"],
    include_dirs=[CSRC],
    extra_compile_args=["-O3"],
    optional=True,  # a failed build is a warning, not a failed install
)])
