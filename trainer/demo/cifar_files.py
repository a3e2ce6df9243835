"""CIFAR-10's python batch files, read without running code from them, and the download into --data-dir.

    train = CIFAR10Files(root, train=True, transform=tf)    # raises ConfigError with one line on a bad file
    download_cifar(data_dir)                                # ConfigError when offline; leaves nothing behind

The batch files are pickles, and a pickle can name any importable function to call while it loads: a crafted
`batches.meta` in --data-dir would run code with plain `pickle.load`. `SafeUnpickler` allows only what the
real files (and the tests' tiny CIFAR-format folders) are built from: dicts, lists, strings and bytes, which
are pickle opcodes, and numpy arrays, which need numpy's array and dtype reconstruction functions. Any
other global, a truncated or corrupt file, or a file without the expected keys is refused with one line.

torchvision's own loading (`pickle.load`) is never used; its archive download still checks the archive's
MD5 before extracting it.
"""

from __future__ import annotations

import io
import pickle
import shutil
from pathlib import Path

import numpy as np
import torchvision
from stepscope.demo.config import ConfigError

CIFAR_FILES = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch",
               "batches.meta"]

# (module, name) pairs that numpy arrays pickle to; numpy 2 moved numpy.core to numpy._core
_ARRAY_GLOBALS = {
    (mod, name)
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric", "numpy._core.numeric")
    for name in ("_reconstruct", "_frombuffer")
}
_NUMPY_TYPES = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}


class UnsafePickle(pickle.UnpicklingError):
    """The file asks for a global that a CIFAR batch file never needs."""


class SafeUnpickler(pickle.Unpickler):
    """Loads plain containers and numpy arrays; any other global raises `UnsafePickle` before it is called."""

    def find_class(self, module: str, name: str):
        if (module, name) in _NUMPY_TYPES:
            return _NUMPY_TYPES[(module, name)]
        if (module, name) in _ARRAY_GLOBALS:
            core = np._core if hasattr(np, "_core") else np.core
            where = core.multiarray if name == "_reconstruct" else core.numeric
            return getattr(where, name)
        raise UnsafePickle(f"it refers to {module}.{name}, which a CIFAR-10 batch file never contains")


def load_batch_file(path: Path, keys: tuple[str, ...]) -> dict:
    """One CIFAR-10 batch (or meta) file as a dict holding `keys`; ConfigError with one line if it is not one."""
    try:
        data = path.read_bytes()
        entry = SafeUnpickler(io.BytesIO(data), encoding="latin1").load()
    except UnsafePickle as e:
        raise ConfigError(f"refusing to load {path}: {e}; replace it with the real CIFAR-10 file") from None
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    except Exception as e:  # noqa: BLE001  truncated or corrupt pickles raise many kinds of errors
        raise ConfigError(f"{path} is not a CIFAR-10 batch file ({type(e).__name__}: "
                          f"{(str(e).splitlines() or [''])[0]}); re-download it with --download into an empty "
                          f"--data-dir") from None
    if not isinstance(entry, dict) or any(k not in entry for k in keys):
        raise ConfigError(f"{path} is not a CIFAR-10 batch file (it lacks the keys {', '.join(keys)}); "
                          f"re-download it with --download into an empty --data-dir")
    return entry


class CIFAR10Files(torchvision.datasets.CIFAR10):
    """torchvision's CIFAR10 (transforms, `__getitem__`, download), its files read with `SafeUnpickler`.

    The batch files must exist; their MD5 sums are not compared with the real CIFAR-10's, so the same code
    reads a small CIFAR-format folder (the tests write one).
    """

    def __init__(self, root: str, train: bool = True, transform=None, target_transform=None) -> None:
        torchvision.datasets.VisionDataset.__init__(self, root, transform=transform,
                                                    target_transform=target_transform)
        self.train = train
        folder = Path(self.root) / self.base_folder
        data, targets = [], []
        for name, _md5 in self.train_list if train else self.test_list:
            entry = load_batch_file(folder / name, ("data", "labels"))
            images = entry["data"]
            if not isinstance(images, np.ndarray) or images.ndim != 2 or images.shape[1] != 3072 or \
                    len(entry["labels"]) != len(images):
                raise ConfigError(f"{folder / name} is not a CIFAR-10 batch file (its data is not N x 3072 "
                                  f"pixels with N labels); re-download it with --download")
            data.append(images.astype(np.uint8, copy=False))
            targets.extend(int(t) for t in entry["labels"])
        self.data = np.vstack(data).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1))  # HWC, as torchvision
        self.targets = targets
        meta = load_batch_file(folder / self.meta["filename"], (self.meta["key"],))
        self.classes = [str(c) for c in meta[self.meta["key"]]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


def download_cifar(data_dir: Path) -> None:
    """torchvision's download (archive MD5-checked) into `data_dir`, unless the files are already there.

    Offline or on a bad archive: ConfigError with one line. On any failure, Ctrl-C included, what this call
    created is removed."""
    data_dir = Path(data_dir)
    folder = data_dir / CIFAR10Files.base_folder
    if all((folder / f).is_file() for f in CIFAR_FILES):
        return
    existed = {p: p.exists() for p in (data_dir, folder, data_dir / CIFAR10Files.filename)}
    try:
        torchvision.datasets.utils.download_and_extract_archive(
            CIFAR10Files.url, str(data_dir), filename=CIFAR10Files.filename, md5=CIFAR10Files.tgz_md5)
    except BaseException as e:  # Ctrl-C during the download too: nothing half-downloaded stays
        for p, was_there in sorted(existed.items(), key=lambda kv: len(kv[0].parts), reverse=True):
            if not was_there and p.exists():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        if not isinstance(e, (OSError, RuntimeError)):
            raise
        reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e)
        raise ConfigError(f"could not download CIFAR-10 from {CIFAR10Files.url} into --data-dir {data_dir}: "
                          f"{(str(reason).splitlines() or ['?'])[0]}; check the network, or put "
                          f"cifar-10-batches-py/ there yourself") from None
