"""The `stepscope` command: one entry point for every tool.

    stepscope train --profile                   # = python scripts/train.py --profile
    stepscope analyze logs/<run>                # = python scripts/analyze.py logs/<run>; a file or any folder
    stepscope compare --device cpu --variants eager --ops native --steps 40    # = python scripts/compare.py
    stepscope tensorboard --logdir DIR          # TensorBoard + plugin on DIR's traces, whatever wrote them
    stepscope --help                            # the subcommands

Each subcommand has its own `--help`; bad input gets one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path


def train_main(argv: list[str] | None = None, prog: str = "train.py") -> int:
    """Train a small ResNet, optionally under torch.profiler (the flags: `stepscope train --help`)."""
    # torch's C++ warnings (read once, when torch is imported) would land in the progress bar; errors still
    # print, and TORCH_CPP_LOG_LEVEL=WARNING brings the rest back
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    from .cli import check_before_torch, parse_and_check
    from .config import ConfigError

    try:
        check_before_torch(argv, prog=prog)
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    import torch

    from .distributed import check_distributed
    from .env import distributed_ranks
    from .loop import train

    cuda_available = torch.cuda.is_available()
    try:
        cfg = parse_and_check(argv, cuda_available, prog=prog)
        check_distributed(cfg, distributed_ranks(), torch.cuda.device_count())
        return train(cfg)
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2


# name -> (where its main lives, the function). Each function takes (argv, prog=...) and returns an exit
# code. The place is a dotted module of the package, or "checkout:<path>", a file relative to the checkout
# this package was loaded from (tools that only exist in a clone, not in a wheel).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("stepscope.command", "train_main"),
    "analyze": ("stepscope.profiler.cli.analyze", "main"),
    "compare": ("stepscope.comparison", "main"),
    "tensorboard": ("stepscope.profiler.cli.tensorboard", "main"),
    "verify": ("stepscope.verify", "main"),
    "bench-ops": ("checkout:scripts/bench_ops.py", "main"),  # a maintainer's benchmark: in a clone only
}
CHECKOUT = "checkout:"


class CommandUnavailable(Exception):
    """The subcommand's code is not in this install; the message is the one line printed."""


def load_function(place: str, function: str):
    """The callable named by a SUBCOMMANDS entry."""
    if not place.startswith(CHECKOUT):
        return getattr(importlib.import_module(place), function)
    path = Path(__file__).resolve().parents[1] / place[len(CHECKOUT):]
    if not path.is_file():
        raise CommandUnavailable(f"{path} is not in this install (it comes with a clone of the repository)")
    spec = importlib.util.spec_from_file_location(f"_stepscope_cmd_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return getattr(module, function)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    names = ", ".join(SUBCOMMANDS)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: stepscope {{{names}}} [ARGS...]\n\n{__doc__.strip()}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"stepscope: error: unknown command {name!r}; valid: {names}", file=sys.stderr)
        return 2
    try:
        function = load_function(*SUBCOMMANDS[name])
    except CommandUnavailable as e:
        print(f"stepscope {name}: error: {e}", file=sys.stderr)
        return 2
    return function(rest, prog=f"stepscope {name}")


if __name__ == "__main__":
    sys.exit(main())
