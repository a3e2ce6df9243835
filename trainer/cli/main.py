"""The `stepscope` command: one entry point for every tool.

    stepscope train --profile                   # = python scripts/train.py --profile
    stepscope analyze logs/<run>                # = python scripts/analyze.py logs/<run>; a file or any folder
    stepscope compare --device cpu --variants eager --ops native --steps 40    # = python scripts/compare.py
    stepscope tensorboard --logdir DIR          # TensorBoard + plugin on DIR's traces, whatever wrote them
    stepscope diff logs/a logs/b                # b's step vs a's, with a confidence interval; --fail-above 5%
    stepscope --help                            # the subcommands

Each subcommand has its own `--help`; bad input gets one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import os
import sys

from stepscope.cli.quick_exit import quick_exit
from stepscope.trace.errors import print_error


def train_main(argv: list[str] | None = None, prog: str = "train.py") -> int:
    """Train a small ResNet, optionally under torch.profiler (the flags: `stepscope train --help`)."""
    # torch's C++ warnings (read once, when torch is imported) would land in the progress bar; errors still
    # print, and TORCH_CPP_LOG_LEVEL=WARNING brings the rest back
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    from stepscope.demo.cli import check_before_torch, parse_and_check
    from stepscope.demo.config import ConfigError

    try:
        check_before_torch(argv, prog=prog)
    except ConfigError as e:
        print_error(f"{prog}: error: {e}")
        return 2
    import torch
    from stepscope.demo.distributed import check_distributed
    from stepscope.demo.env import distributed_ranks
    from stepscope.demo.loop import train

    cuda_available = torch.cuda.is_available()
    try:
        cfg = parse_and_check(argv, cuda_available, prog=prog)
        check_distributed(cfg, distributed_ranks(), torch.cuda.device_count())
        return train(cfg)
    except ConfigError as e:
        print_error(f"{prog}: error: {e}")
        return 2


# name -> (the package module its main lives in, the function). Each function takes (argv, prog=...) and
# returns an exit code.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("stepscope.cli.main", "train_main"),
    "analyze": ("stepscope.cli.analyze", "main"),
    "compare": ("stepscope.demo.comparison", "main"),
    "tensorboard": ("stepscope.cli.tensorboard", "main"),
    "verify": ("stepscope.demo.verify", "main"),
    "diff": ("stepscope.cli.diff", "main"),
}


# commands that only read traces (trace/workers.one_blas_thread); those of them that end without the
# interpreter's teardown once they return (quick_exit.py)
READ_ONLY = ("analyze", "tensorboard", "diff")
QUICK_EXIT = ("analyze", "diff")


def load_function(place: str, function: str):
    """The callable named by a SUBCOMMANDS entry."""
    return getattr(importlib.import_module(place), function)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    names = ", ".join(SUBCOMMANDS)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: stepscope {{{names}}} [ARGS...]\n\n{__doc__.strip()}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print_error(f"stepscope: error: unknown command {name!r}; valid: {names}")
        return 2
    if name in READ_ONLY:
        from stepscope.trace.workers import one_blas_thread  # before numpy is imported

        one_blas_thread()
    return load_function(*SUBCOMMANDS[name])(rest, prog=f"stepscope {name}")


def run() -> None:
    """The `stepscope` console script: ``main()``, whose process then ends as quick_exit.py says for a command
    that only reads traces and returns."""
    argv = sys.argv[1:]
    code = main(argv)
    sys.exit(quick_exit(code) if argv[:1] and argv[0] in QUICK_EXIT else code)


if __name__ == "__main__":
    run()
