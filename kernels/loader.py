"""Find the build tools, build (JIT, cached) and load the stepscope ops library, once per process.

load() never raises: it returns the library path, or for each device type one line saying what is
missing. The library is built by torch.utils.cpp_extension.load with ninja into
$TORCH_EXTENSIONS_DIR/<name> (default ~/.cache/stepscope/torch_extensions/<name>). <name> carries
the torch version, whether the CUDA kernels are in, and a hash of the sources and flags, so each
torch and each version of the sources gets its own build (a build of other sources is never
reused); later loads of the same sources reuse it. The CUDA kernels are built only where
torch.cuda.is_available(); elsewhere the library holds the CPU kernels alone.

After loading, the Python side is registered: fake impls (_registrations.py) and Inductor
decompositions (decompositions.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import re
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

CSRC = Path(__file__).resolve().parent / "csrc"
CPU_SOURCES = sorted(CSRC.glob("*.cpp"))
CUDA_SOURCES = sorted((CSRC / "cuda").glob("*.cu"))
HEADERS = sorted(CSRC.rglob("*.h"))
# The package this copy is imported as ("kernels"; "stepscope.kernels" once packaged so): the C++
# library names its fake-impl module, <package>._registrations, for torch to import when needed.
PYTHON_PACKAGE = __package__ or "kernels"
# -mf16c: hardware fp16<->fp32 conversion (every x86-64 CPU since 2013); without it c10::Half
# converts in software through denormal arithmetic, about 50x slower than eager PyTorch.
CXX_FLAGS = [
    "-O3",
    *(["-mf16c"] if platform.machine() in ("x86_64", "AMD64") else []),
    f"-DSTEPSCOPE_PYTHON_PACKAGE={PYTHON_PACKAGE}",
]
CUDA_FLAGS = ["-O3", "-lineinfo"]  # -lineinfo: ncu can map time to source lines; no speed cost
DEVICE_TYPES = ("cpu", "cuda")


@dataclass(frozen=True)
class LoadResult:
    """What this process could load: the library path, or why each device type is unavailable."""

    library: str | None
    reasons: dict[str, str | None]  # device type -> None (ops run there) or one line: what is missing
    calls: object | None = None  # the library as a Python module: direct entry points (csrc/python_calls.cpp)


_lock = threading.Lock()
_result: LoadResult | None = None


def sources_hash(with_cuda: bool) -> str:
    """Eight hex digits of a hash of every source, header and compiler flag the build uses."""
    digest = hashlib.sha256()
    for path in [*CPU_SOURCES, *HEADERS, *(CUDA_SOURCES if with_cuda else [])]:
        digest.update(str(path.relative_to(CSRC)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(repr((CXX_FLAGS, CUDA_FLAGS if with_cuda else None)).encode())
    return digest.hexdigest()[:8]


def library_name(with_cuda: bool) -> str:
    torch_tag = re.sub(r"[^0-9A-Za-z]+", "_", torch.__version__)
    return f"stepscope_ops_torch{torch_tag}_{'cuda' if with_cuda else 'cpu'}_{sources_hash(with_cuda)}"


def build_directory(name: str) -> Path:
    base = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "stepscope" / "torch_extensions"
    return Path(base) / name


def cpp_extension_module():
    """torch.utils.cpp_extension, imported without its CUDA_HOME guess warning (we check ourselves)."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        logger.setLevel(level)
    return cpp_extension


def cuda_home() -> str | None:
    return os.environ.get("CUDA_HOME") or cpp_extension_module().CUDA_HOME


def missing_host_tools() -> str | None:
    """One line naming the first missing host build tool, or None."""
    if not cpp_extension_module().is_ninja_available():
        return "ninja not installed (pip install ninja)"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler ({cxx}) found"
    return None


def missing_cuda_tools() -> str | None:
    """One line saying why CUDA kernels can't be built and run here, or None."""
    if torch.version.cuda is None:
        return f"this torch build ({torch.__version__}) has no CUDA support"
    if not torch.cuda.is_available():
        return "no CUDA GPU available (torch.cuda.is_available() is False)"
    home = cuda_home()
    if home is None or not (Path(home) / "bin" / "nvcc").exists():
        return "CUDA toolkit not found: set CUDA_HOME"
    if not any((Path(home) / lib / "libcudart.so").exists() for lib in ("lib64", "lib")):
        return f"CUDA toolkit at {home} has no lib64/libcudart.so: set CUDA_HOME to the toolkit root"
    return None


def _import_library(name: str, path: Path):
    """The built library as a Python module; importing it (dlopen) also registers its ops with torch."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_and_load(with_cuda: bool, verbose: bool):
    cpp_extension = cpp_extension_module()
    name = library_name(with_cuda)
    directory = build_directory(name)
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / f"{name}.so").exists():
        print(f"stepscope: building {name} in {directory} (first use; cached afterwards)", file=sys.stderr)
    sources = CPU_SOURCES + (CUDA_SOURCES if with_cuda else [])
    library = cpp_extension.load(
        name=name,
        sources=[str(s) for s in sources],
        extra_cflags=CXX_FLAGS,
        extra_cuda_cflags=CUDA_FLAGS,
        extra_include_paths=[str(CSRC)],
        build_directory=str(directory),
        verbose=verbose,
        with_cuda=with_cuda,
        is_python_module=True,
    )
    from stepscope.kernels import _registrations, decompositions  # noqa: F401  _registrations: the fake impls

    decompositions.register()

    return library


def load_if_built() -> bool:
    """Load the library now if this torch already has a build of these sources (no compiler runs); True if it
    did. `import stepscope.kernels` calls this, so that torch.ops.stepscope.* exist at once when built."""
    global _result
    with _lock:
        if _result is not None:
            return _result.library is not None
        cuda_missing = missing_cuda_tools()
        name = library_name(cuda_missing is None)
        path = build_directory(name) / f"{name}.so"
        if not path.exists():
            return False
        try:
            calls = _import_library(name, path)
            from stepscope.kernels import _registrations, decompositions  # noqa: F401  _registrations: the fake impls

            decompositions.register()
        except Exception:  # noqa: BLE001  a stale or broken file: the first call builds and says why
            return False
        _result = LoadResult(library=str(path), reasons={"cpu": None, "cuda": cuda_missing}, calls=calls)
        return True


def load(verbose: bool = False) -> LoadResult:
    """Builds (first time) and loads the library once per process; never raises."""
    global _result
    with _lock:
        if _result is not None:
            return _result
        host_missing = missing_host_tools()
        cuda_missing = host_missing or missing_cuda_tools()
        library = calls = None
        if host_missing is None:
            try:
                calls = _build_and_load(with_cuda=cuda_missing is None, verbose=verbose)
                library = calls.__file__
            except Exception as e:  # noqa: BLE001  any build failure becomes the one-line reason
                first_line = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
                host_missing = (
                    f"building the stepscope ops failed ({first_line[:200]}); "
                    "run `python -m stepscope.kernels.build` for the compiler output"
                )
                cuda_missing = cuda_missing or host_missing
        _result = LoadResult(library=library, reasons={"cpu": host_missing, "cuda": cuda_missing}, calls=calls)
        return _result
