"""Write a CIFAR-10-format folder of random images: the real files, keys and layout of cifar-10-batches-py.

    python scripts/make_cifar_folder.py DIR [--per-file N]     # DIR/cifar-10-batches-py/, N images per file

For machines that cannot download CIFAR-10 (the GPU machines here): `train.py --data cifar10 --data-dir DIR`
then runs the real torchvision loading path. Prints the folder it wrote.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

FILES = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"]


def write_cifar_folder(root: Path, per_file: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        entry = {"batch_label": name, "data": rng.integers(0, 256, (per_file, 3072), dtype=np.uint8),
                 "labels": rng.integers(0, 10, per_file).tolist(),
                 "filenames": [f"{name}_{i}.png" for i in range(per_file)]}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": per_file}, f)
    return folder


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("--per-file", type=int, default=10000)
    a = p.parse_args()
    if a.per_file < 1:
        p.error(f"--per-file {a.per_file}: use 1 or more")
    print(write_cifar_folder(a.root, a.per_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
