"""Command line -> `TrainConfig`, and the checks that must pass before anything is written.

Any bad value ends the program with one line on stderr and exit code 2, and no run directory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stepscope.cli.oneline import OneLineParser
from stepscope.demo.config import (
    ARCHS,
    COMPILE_MODES,
    DATASETS,
    DEVICES,
    OPS,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    ProfileConfig,
    RunConfig,
    TrainConfig,
    resolve_device,
    validate,
)


def non_empty_path(text: str) -> Path:
    """argparse type for a directory flag: "" would silently mean the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty; give a directory, e.g. logs")
    return Path(text)


def build_parser(prog: str = "train.py") -> argparse.ArgumentParser:
    d = TrainConfig()
    p = OneLineParser(prog=prog, description="Train a small ResNet, optionally under torch.profiler.")
    B = argparse.BooleanOptionalAction
    p.add_argument("--arch", default=d.model.arch, help=f"one of {', '.join(ARCHS)}")
    p.add_argument("--ops", default=d.model.ops, help=f"elementwise ops: {', '.join(OPS)} (custom = kernels/)")
    p.add_argument("--data", default=d.data.name, help=f"one of {', '.join(DATASETS)}")
    p.add_argument("--data-dir", type=non_empty_path, default=d.data.data_dir, help="CIFAR-10 folder")
    p.add_argument("--download", action="store_true", help="download CIFAR-10 into --data-dir")
    p.add_argument("--workers", type=int, default=d.data.workers, help="DataLoader workers (cifar10)")
    p.add_argument("--data-placement", default=d.data.placement,
                   help="synthetic data: 'device' (generated on the GPU) or 'host' (copied in every step)")
    p.add_argument("--augment", default=d.data.augment,
                   help="cifar10 augmentation: 'basic' (crop, flip) or 'heavy' (+ RandAugment, colour jitter)")
    p.add_argument("--pin-memory", action=B, default=d.data.pin_memory,
                   help="host batches in pinned memory, copied with non_blocking=True (CUDA)")
    p.add_argument("--batch-size", type=int, default=d.data.batch_size, help="per rank under torchrun")
    p.add_argument("--synthetic-train-size", type=int, default=d.data.synthetic_train_size)
    p.add_argument("--synthetic-eval-size", type=int, default=d.data.synthetic_eval_size)
    p.add_argument("--steps", type=int, default=d.steps, help="training steps")
    p.add_argument("--lr", type=float, default=d.optim.lr, help="peak LR at batch 64 (scaled with batch)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", default=d.device, help=f"one of {', '.join(DEVICES)}")
    p.add_argument("--bf16", action=B, default=d.bf16, help="bf16 autocast on CUDA")
    p.add_argument("--channels-last", action=B, default=d.channels_last, help="channels_last on CUDA")
    p.add_argument("--cuda-graphs", action="store_true", help="capture the whole step as one CUDA graph")
    p.add_argument("--checkpoint-activations", action=B, default=d.model.checkpoint,
                   help="recompute each residual block in the backward: less memory, more compute (resnets)")
    p.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                   help=f"torch.compile the model: {', '.join(COMPILE_MODES)}")
    p.add_argument("--logdir", type=non_empty_path, default=d.run.logdir)
    p.add_argument("--run-name", default=None, help="default: a unique timestamped name")
    p.add_argument("--log-every", type=int, default=d.run.log_every, help="logging cadence in steps")
    p.add_argument("--nvtx", action="store_true", help="also emit NVTX ranges (for nsys)")
    g = p.add_argument_group("profiling")
    pd = ProfileConfig()
    g.add_argument("--profile", action="store_true", help="run the steps under torch.profiler")
    for name in ("skip_first", "wait", "warmup", "active", "repeat"):
        g.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(pd, name),
                       help=f"profiler schedule (default {getattr(pd, name)})")
    for name in ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules"):
        g.add_argument(f"--{name.replace('_', '-')}", action=B, default=getattr(pd, name))
    g.add_argument("--gzip", action=B, default=pd.gzip, help="gzip the traces")
    g.add_argument("--export-chrome-trace", action="store_true", help="also write a plain Chrome trace (Perfetto)")
    g.add_argument("--flamegraph", action="store_true", help="also write an SVG flame graph of the call stacks")
    g.add_argument("--memory-timeline", action="store_true", help="also write export_memory_timeline HTML")
    return p


def config_from_args(a: argparse.Namespace, device: str) -> TrainConfig:
    """The config of parsed flags; `device` is the resolved one ("cpu" or "cuda", see `resolve_device`)."""
    return TrainConfig(
        model=ModelConfig(arch=a.arch, ops=a.ops, checkpoint=a.checkpoint_activations),
        data=DataConfig(name=a.data, data_dir=a.data_dir, download=a.download, batch_size=a.batch_size,
                        workers=a.workers, placement=a.data_placement, pin_memory=a.pin_memory,
                        augment=a.augment,
                        synthetic_train_size=a.synthetic_train_size,
                        synthetic_eval_size=a.synthetic_eval_size),
        optim=OptimConfig(lr=a.lr),
        profile=ProfileConfig(enabled=a.profile, skip_first=a.skip_first, wait=a.wait, warmup=a.warmup,
                              active=a.active, repeat=a.repeat, record_shapes=a.record_shapes,
                              profile_memory=a.profile_memory, with_stack=a.with_stack, with_flops=a.with_flops,
                              with_modules=a.with_modules, gzip=a.gzip,
                              export_chrome_trace=a.export_chrome_trace, flamegraph=a.flamegraph,
                              memory_timeline=a.memory_timeline),
        run=RunConfig(logdir=a.logdir, run_name=a.run_name, log_every=a.log_every, nvtx=a.nvtx),
        steps=a.steps, seed=a.seed, device=device, bf16=a.bf16, channels_last=a.channels_last,
        cuda_graphs=a.cuda_graphs, compile=a.compile,
    )


def check_custom_ops(cfg: TrainConfig) -> None:
    if cfg.model.ops != "custom":
        return
    from stepscope import kernels

    reason = kernels.unavailable_reason(cfg.device)
    if reason is not None:
        raise ConfigError(f"--ops custom is unavailable on {cfg.device}: {reason}")


def check_before_torch(argv: list[str] | None, prog: str = "train.py") -> None:
    """The checks that need no torch (flags, values, their rules), so that a typo is answered at once rather
    than after torch's import. A rule whose answer depends on the GPU (``--device``, ``--cuda-graphs``) is
    reported here only when it fails on a machine with a GPU and on one without; `parse_and_check` decides the
    rest. Raises ConfigError; argparse's own errors exit 2 as usual."""
    args = build_parser(prog).parse_args(argv)
    messages = set()
    for cuda_available in (False, True):
        try:
            validate(config_from_args(args, resolve_device(args.device, cuda_available)))
            return
        except ConfigError as e:
            messages.add(str(e))
    if len(messages) == 1:
        raise ConfigError(messages.pop())


def parse_and_check(argv: list[str] | None, cuda_available: bool, prog: str = "train.py") -> TrainConfig:
    """Parse, validate and check the environment; raises ConfigError with one line on any problem."""
    from stepscope.demo.data import check_data, check_synthetic_fits

    args = build_parser(prog).parse_args(argv)
    cfg = config_from_args(args, resolve_device(args.device, cuda_available))
    validate(cfg)
    check_data(cfg.data)
    check_synthetic_fits(cfg.data, cfg.device)
    check_custom_ops(cfg)
    return cfg
