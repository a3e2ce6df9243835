"""Prove a run's verdict by removing its cause and timing both runs (stepscope.trainer.verify).

    python scripts/verify.py logs/<run> [--steps N]      # = stepscope verify, with this checkout's code
"""

import sys
from pathlib import Path

import _checkout  # noqa: F401  this checkout's stepscope.trainer
from stepscope.trainer.launch import checkout_train
from stepscope.trainer.verify import main

if __name__ == "__main__":
    sys.exit(main(prog="verify.py", train_cmd=checkout_train(Path(__file__).resolve().parents[1])))
