"""The `stepscope` command: one entry point for every tool.

    stepscope train --profile                   # = python scripts/train.py --profile
    stepscope analyze logs/<run>                # = python scripts/analyze.py logs/<run>
    stepscope --help                            # the subcommands

Each subcommand has its own `--help`; bad input gets one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys


def train_main(argv: list[str] | None = None, prog: str = "train.py") -> int:
    """Train a small ResNet, optionally under torch.profiler (the flags: `stepscope train --help`)."""
    import torch
    from stepscope.trainer.cli import parse_and_check
    from stepscope.trainer.config import ConfigError
    from stepscope.trainer.distributed import check_distributed
    from stepscope.trainer.env import distributed_ranks
    from stepscope.trainer.loop import train

    cuda_available = torch.cuda.is_available()
    try:
        cfg = parse_and_check(argv, cuda_available, prog=prog)
        check_distributed(cfg, distributed_ranks(), torch.cuda.device_count())
        return train(cfg)
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2


SUBCOMMANDS = {
    "train": ("stepscope.trainer.command", "train_main"),
}


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
    module, function = SUBCOMMANDS[name]
    import importlib

    return getattr(importlib.import_module(module), function)(rest, prog=f"stepscope {name}")


if __name__ == "__main__":
    sys.exit(main())
