"""Write a CIFAR-10-format folder of random images: the real files, keys and layout of cifar-10-batches-py.

    python scripts/make_cifar_folder.py DIR [--per-file N]     # DIR/cifar-10-batches-py/, N images per file

The code lives in bench.cifar_folder (scripts/bench/cifar_folder.py); this is its command.
"""

import sys

from bench.cifar_folder import main

if __name__ == "__main__":
    sys.exit(main())
