"""Prove a run's verdict by removing its cause and timing both runs (stepscope.demo.verify).

    python scripts/verify.py logs/<run> [--steps N]      # = stepscope verify, with this checkout's code
"""

import sys
from pathlib import Path

from stepscope.demo.launch import checkout_train
from stepscope.demo.verify import main

if __name__ == "__main__":
    sys.exit(main(prog="verify.py", train_cmd=checkout_train(Path(__file__).resolve().parents[1])))
