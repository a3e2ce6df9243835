"""The run directory `logs/<run>/` and its `run.json`.

Run names are unique: a timestamp by default (with a numeric suffix on collision), or `--run-name`.
An existing run is never overwritten: the directory is created with `mkdir` (atomic, fails if it exists)
and `run.json` is replaced atomically each time it is written.
"""

from __future__ import annotations

import errno
import os
import platform
import socket
import subprocess
import time
from pathlib import Path

from stepscope.demo.config import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # disk full, quota reached, file size limit


def no_space(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS


# Room set aside beside run.json at the start of a run and given back at its end. If the disk fills up
# during the run, freeing it first lets run.json still record how the run ended ("failed", not "running").
# Its size is measured from the smallest record the run can end with (finish.reserve_bytes): room for that
# record written whole beside the old run.json (the atomic write needs both for a moment), in whole pages.
RESERVE_NAME = ".run.json.reserve"
PAGE = 4096


def reserve_space(run_dir: Path, nbytes: int) -> bool:
    """Set ``nbytes`` aside; on a disk already too full for it, go on without (best effort). True if set."""
    path = Path(run_dir) / RESERVE_NAME
    try:
        with open(path, "wb") as f:
            f.write(bytes(nbytes))
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        path.unlink(missing_ok=True)
        return False


def release_space(run_dir: Path) -> bool:
    """Give the room back; True if there was any to give."""
    path = Path(run_dir) / RESERVE_NAME
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


class NoSpace(ConfigError):
    """The disk under --logdir filled up: one line, exit code 2, as for an unwritable --logdir."""

    def __init__(self, e: OSError) -> None:
        where = f" writing {e.filename}" if e.filename else ""
        super().__init__(f"{(e.strerror or str(e)).lower()}{where}; free some space or pass another --logdir")


def create_run_dir(logdir: Path, run_name: str | None, tag: str) -> Path:
    logdir.mkdir(parents=True, exist_ok=True)
    if run_name is not None:
        path = logdir / run_name
        try:
            path.mkdir()
        except FileExistsError:
            raise ConfigError(f"run {path} already exists and is never overwritten; choose another --run-name") from None
        return path
    base = time.strftime("%Y%m%d-%H%M%S") + f"-{tag}"
    for i in range(1000):
        path = logdir / (base if i == 0 else f"{base}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ConfigError(f"could not find a free run name under {logdir} starting with {base}")


def create_result_dir(logdir: Path, name: str | None, prefix: str) -> Path:
    """A new folder `logdir/name` (default `<prefix>-<timestamp>`) for a script's runs; never an existing one."""
    root = logdir / (name or time.strftime(f"{prefix}-%Y%m%d-%H%M%S"))
    try:
        root.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise ConfigError(f"{root} already exists and is never overwritten; pass another --name") from None
    except OSError as e:
        raise ConfigError(f"cannot create {root}: {e.strerror}; pass a writable --logdir") from None
    return root


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment_info(device) -> dict:
    """Versions of torch, CUDA and the GPU (``device``: a torch.device), and the host."""
    import importlib.metadata

    import torch  # here, not at the top: the run directory's other helpers serve torch-free checks

    try:  # the installed version, without importing torchvision (about 2 s of CPU that a synthetic run never needs)
        vision = importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        vision = None
    info = {
        "torch": torch.__version__,
        "torchvision": vision,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    return info

