"""The run's configuration: frozen dataclasses, one per builder, validated before anything is written.

Only `train()` sees the whole `TrainConfig`; each builder receives its own sub-config.
`validate(cfg)` raises `ConfigError` with one line that names the bad value and what would be valid.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stepscope.capture.options import ProfileConfig

ARCHS = ("resnet8", "resnet18", "torchvision-resnet18", "lenet")
DATASETS = ("synthetic", "cifar10")
DEVICES = ("auto", "cpu", "cuda")
PLACEMENTS = ("device", "host")
AUGMENTS = ("basic", "heavy")
OPS = ("native", "custom")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


CHECKPOINTED_ARCHS = ("resnet8", "resnet18")  # the archs whose blocks --checkpoint-activations recomputes


class ConfigError(ValueError):
    """A bad flag value. The message is one line, shown as is, and the program exits with code 2."""


@dataclass(frozen=True)
class ModelConfig:
    arch: str = "resnet8"  # tiny and CPU-friendly: the default run must finish in a minute on 2 cores
    num_classes: int = 10
    ops: str = "native"  # "custom" swaps in kernels/ (stepscope::relu, stepscope::add_relu)
    checkpoint: bool = False  # activation checkpointing: each residual block recomputed in the backward (resnets)


@dataclass(frozen=True)
class DataConfig:
    name: str = "synthetic"
    data_dir: Path = Path("data")
    download: bool = False
    batch_size: int = 64  # per rank under torchrun
    workers: int = 2  # DataLoader workers (cifar10 only)
    placement: str = "device"  # synthetic data: generated and kept on the device, or held in host memory
    pin_memory: bool = True  # host batches in page-locked memory, copied with non_blocking=True (CUDA only)
    augment: str = "basic"  # cifar10: random crop and flip; "heavy" adds RandAugment and colour jitter per sample
    synthetic_train_size: int = 4096  # 64 steps per epoch at the default batch size
    synthetic_eval_size: int = 1024


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 0.2  # peak LR for Nesterov SGD at batch 64; scaled linearly with batch size / 64
    momentum: float = 0.9
    weight_decay: float = 5e-4
    label_smoothing: float = 0.1
    warmup_frac: float = 0.1  # linear warm-up over the first 10% of steps, then linear decay to 0


@dataclass(frozen=True)
class RunConfig:
    logdir: Path = Path("logs")
    run_name: str | None = None  # default: a timestamp-based unique name
    log_every: int = 10  # the logging cadence: the only host-device syncs in the loop happen here
    nvtx: bool = False


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    run: RunConfig = field(default_factory=RunConfig)
    steps: int = 192  # 3 synthetic epochs at the defaults: the loss visibly falls within a minute on CPU
    seed: int = 0
    device: str = "auto"  # "auto" on the command line; `resolve_device` makes it "cpu" or "cuda" before validation
    bf16: bool = True  # bf16 autocast on CUDA (never on CPU)
    channels_last: bool = True  # on CUDA only
    cuda_graphs: bool = False
    compile: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["data"]["data_dir"] = str(self.data.data_dir)
        d["run"]["logdir"] = str(self.run.logdir)
        return d


def _positive(name: str, value: int | float) -> None:
    if value <= 0:
        raise ConfigError(f"{name} must be a positive number, got {value}")


def _finite_positive(name: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite positive number, got {value}")


SEED_MAX = 2**32 - 1  # numpy's seed range; torch accepts more, but one seed must seed both
NAME_MAX_BYTES = 255  # the longest file name most file systems accept


def plain_name(flag: str, name: str) -> None:
    """A plain, printable directory name of at most 255 bytes: no path separators, no control characters."""
    if not name or name in (".", "..") or "/" in name or os.sep in name or name.startswith("-"):
        raise ConfigError(f"{flag} {name!r} is not a plain directory name; use letters, digits, '-', '_'")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ConfigError(f"{flag} {name!r} contains control characters; use letters, digits, '-', '_'")
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > NAME_MAX_BYTES:
        raise ConfigError(f"{flag} is {size} bytes long; a directory name may have at most {NAME_MAX_BYTES}")


def _non_negative(name: str, value: int) -> None:
    if value < 0:
        raise ConfigError(f"{name} must be 0 or more, got {value}")


def _choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


def _writable_logdir(logdir: Path) -> None:
    """The logdir must exist and be writable, or be creatable (its nearest existing parent writable)."""
    p = logdir.resolve()
    while not p.exists():
        p = p.parent
    if not p.is_dir():
        raise ConfigError(f"--logdir {logdir} is not usable: {p} is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"--logdir {logdir} is not writable ({p} denies write access); pass a writable --logdir")


def resolve_device(requested: str, cuda_available: bool) -> str:
    """The one place the device is decided: "auto" becomes "cuda" when torch sees a GPU, else "cpu"."""
    _choice("--device", requested, DEVICES)
    if requested == "cuda" and not cuda_available:
        raise ConfigError("--device cuda but no CUDA GPU is visible to torch; use --device cpu or auto")
    if requested == "auto":
        return "cuda" if cuda_available else "cpu"
    return requested


def validate(cfg: TrainConfig) -> None:
    """Raise ConfigError on the first bad value. Runs before anything is written; `cfg.device` is resolved."""
    _positive("--steps", cfg.steps)
    _positive("--batch-size", cfg.data.batch_size)
    _finite_positive("--lr", cfg.optim.lr)
    if not 0 <= cfg.seed <= SEED_MAX:
        raise ConfigError(f"--seed must be between 0 and {SEED_MAX} (2**32-1), got {cfg.seed}")
    _positive("--log-every", cfg.run.log_every)
    _non_negative("--workers", cfg.data.workers)
    _choice("--arch", cfg.model.arch, ARCHS)
    _choice("--data", cfg.data.name, DATASETS)
    _choice("--device", cfg.device, ("cpu", "cuda"))
    _choice("--ops", cfg.model.ops, OPS)
    _choice("--data-placement", cfg.data.placement, PLACEMENTS)
    _choice("--augment", cfg.data.augment, AUGMENTS)
    if cfg.compile is not None:
        _choice("--compile mode", cfg.compile, COMPILE_MODES)
    if cfg.data.name == "synthetic":
        _positive("--synthetic-train-size", cfg.data.synthetic_train_size)
        _positive("--synthetic-eval-size", cfg.data.synthetic_eval_size)
        if cfg.data.synthetic_train_size < cfg.data.batch_size:
            raise ConfigError(f"--batch-size {cfg.data.batch_size} exceeds --synthetic-train-size "
                              f"{cfg.data.synthetic_train_size}; use a batch size of at most that")
    if cfg.run.run_name is not None:
        plain_name("--run-name", cfg.run.run_name)
    _writable_logdir(cfg.run.logdir)
    if cfg.model.checkpoint and cfg.model.arch not in CHECKPOINTED_ARCHS:
        raise ConfigError(f"--checkpoint-activations: {', '.join(CHECKPOINTED_ARCHS)} only (not {cfg.model.arch})")
    _validate_profile(cfg)
    if cfg.cuda_graphs and cfg.device != "cuda":
        raise ConfigError("--cuda-graphs needs a CUDA GPU (graphs capture CUDA work); drop it on CPU")
    if cfg.cuda_graphs and cfg.compile is not None:
        raise ConfigError("--cuda-graphs and --compile are exclusive; for compiled graphs use --compile reduce-overhead")
    if cfg.cuda_graphs and (cfg.data.name != "synthetic" or cfg.data.placement != "device"):
        raise ConfigError("--cuda-graphs needs --data synthetic with --data-placement device: host batches and "
                          "their copies cannot be captured; use --compile reduce-overhead instead")


def _validate_profile(cfg: TrainConfig) -> None:
    p = cfg.profile
    for name, value in (("--skip-first", p.skip_first), ("--wait", p.wait), ("--warmup", p.warmup),
                        ("--repeat", p.repeat)):
        _non_negative(name, value)
    _positive("--active", p.active)
    if not p.enabled:
        for flag, on in (("--export-chrome-trace", p.export_chrome_trace), ("--flamegraph", p.flamegraph),
                         ("--memory-timeline", p.memory_timeline)):
            if on:
                raise ConfigError(f"{flag} needs --profile")
        return
    first = p.first_recorded_step()
    if first + p.active > cfg.steps:
        raise ConfigError(
            f"the profiler schedule records nothing within --steps {cfg.steps}: it skips {p.skip_first}, waits "
            f"{p.wait} and warms up {p.warmup} steps, then needs {p.active} active steps "
            f"({first + p.active} in all); raise --steps or lower --skip-first/--wait/--warmup/--active")
    if p.flamegraph and not p.with_stack:
        raise ConfigError("--flamegraph needs call stacks; drop --no-with-stack")
    if p.memory_timeline and not (p.with_stack and p.record_shapes and p.profile_memory):
        raise ConfigError("--memory-timeline needs --with-stack, --record-shapes and --profile-memory (all on by default)")
