"""Prebuild the stepscope ops library, or compile-check its CUDA sources (CI, no GPU needed).

    python -m stepscope.kernels.build                # build/load for this machine; prints where the library went
    python -m stepscope.kernels.build --check-cuda   # compile csrc/cuda/*.cu with nvcc only (CI)

The build itself is kernels/loader.py's (cached; see there). --check-cuda compiles every .cu file
with $CUDA_HOME/bin/nvcc for $TORCH_CUDA_ARCH_LIST (default 9.0) into object files, printing each
command, the compiler output and the time; the exit status is 1 on any compile error.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
from stepscope.kernels.loader import (
    CSRC,
    CUDA_FLAGS,
    CUDA_SOURCES,
    DEVICE_TYPES,
    build_directory,
    cpp_extension_module,
    cuda_home,
    library_name,
    load,
)

# ---------------------------------------------------------------- CI: compile-only CUDA check


def cxx_standard() -> str:
    """The C++ standard this torch was built with (its headers may need it)."""
    found = re.search(r"C\+\+ Version: (\d{4})", torch.__config__.show())
    year = int(found.group(1)) if found else 2017
    return "-std=c++20" if year >= 2020 else "-std=c++17"


def gencode_flags(arch_list: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST ("9.0", "8.0;9.0+PTX", "9.0a") as nvcc -gencode flags."""
    flags = []
    for entry in re.split(r"[;\s]+", arch_list.strip()):
        if not entry:
            continue
        found = re.fullmatch(r"(\d+)\.(\d+)(a?)(\+PTX)?", entry)
        if found is None:
            raise ValueError(f"TORCH_CUDA_ARCH_LIST entry {entry!r} is not like 9.0, 9.0a or 9.0+PTX")
        arch = f"{found.group(1)}{found.group(2)}{found.group(3)}"
        codes = f"sm_{arch}" + (f",compute_{arch}" if found.group(4) else "")
        flags.append(f"-gencode=arch=compute_{arch},code=[{codes}]")
    return flags


def check_cuda(arch_list: str, out_dir: Path) -> int:
    """Compiles every .cu source to an object file with nvcc, in parallel; returns an exit status."""
    cpp_extension = cpp_extension_module()
    home = cuda_home()
    nvcc = Path(home or "/usr/local/cuda") / "bin" / "nvcc"
    if not nvcc.exists():
        print(f"check-cuda: no nvcc at {nvcc}; set CUDA_HOME (e.g. /usr/local/cuda)", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    includes = [f"-I{p}" for p in [str(CSRC), *cpp_extension.include_paths("cuda")]]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    common = [
        *includes, *cpp_extension.COMMON_NVCC_FLAGS, *gencode_flags(arch_list), *CUDA_FLAGS, cxx_standard(),
        "--compiler-options", "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-DTORCH_EXTENSION_NAME={library_name(True)}",
    ]  # fmt: skip
    started = time.perf_counter()
    jobs = []
    for source in CUDA_SOURCES:
        command = [str(nvcc), "-c", str(source), "-o", str(out_dir / f"{source.stem}.o"), *common]
        print("check-cuda:", " ".join(command), flush=True)
        jobs.append((source, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    failed = 0
    for source, job in jobs:
        output, _ = job.communicate()
        if output.strip():
            print(output, end="" if output.endswith("\n") else "\n")
        status = "ok" if job.returncode == 0 else f"FAILED (exit {job.returncode})"
        print(f"check-cuda: {source.relative_to(CSRC.parent.parent)}: {status}", flush=True)
        failed += job.returncode != 0
    seconds = time.perf_counter() - started
    print(f"check-cuda: {len(jobs) - failed}/{len(jobs)} CUDA sources compiled for {arch_list} in {seconds:.0f} s")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check-cuda", action="store_true", help="compile the CUDA sources only (no GPU needed)")
    parser.add_argument("--out", type=Path, default=None, help="object-file folder for --check-cuda")
    args = parser.parse_args(argv)
    if args.check_cuda:
        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0")
        out_dir = args.out or build_directory(library_name(True) + "_check")
        return check_cuda(arch_list, out_dir)
    result = load(verbose=True)
    for device_type in DEVICE_TYPES:
        reason = result.reasons[device_type]
        print(f"{device_type}: {'available' if reason is None else 'unavailable: ' + reason}")
    if result.library is None:
        return 1
    print(f"library: {result.library}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
