"""Compare step variants side by side (eager, torch.compile, CUDA graphs; native and custom ops), one
`scripts/train.py --profile` run each under logs/compare-<timestamp>/.

    python scripts/compare.py --arch resnet18 --batch-size 128 --steps 300          # on a GPU
    python scripts/compare.py --device cpu --variants eager compile --ops native --steps 40

The same as `stepscope compare`, run from this checkout (trainer/demo/comparison.py says what it prints); each
variant runs this checkout's scripts/train.py and the default --logdir is this checkout's logs/.
"""

import sys
from pathlib import Path

from stepscope.demo.comparison import main
from stepscope.demo.launch import checkout_train

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    sys.exit(main(prog="compare.py", train_cmd=checkout_train(REPO),
                  default_logdir=REPO / "logs", cwd=REPO))
