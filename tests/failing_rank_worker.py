"""scripts/train.py under torchrun, with one rank made to fail: the fault is injected here, not in the trainer.

    torchrun --nproc_per_node 2 tests/failing_rank_worker.py STEP RANK [train.py flags...]

Rank RANK raises `RuntimeError("injected failure at step STEP on rank RANK")` when the loop asks for the
batch of step STEP (`host_batches`); every other rank trains normally. tests/test_ddp.py checks that the whole group then
ends promptly with that rank's error as torchrun's root cause.
"""

from __future__ import annotations

import os
import sys

from stepscope.cli.main import train_main
from stepscope.demo import loop
from torch.distributed.elastic.multiprocessing.errors import record


def failing_data(build_data, fail_at: int, rank: int):
    def build(*args, **kwargs):
        data = build_data(*args, **kwargs)
        host_batches = data.host_batches

        def failing_batches():
            for step, batch in enumerate(host_batches(), 1):
                if step == fail_at and int(os.environ["RANK"]) == rank:
                    raise RuntimeError(f"injected failure at step {step} on rank {rank}")
                yield batch

        data.host_batches = failing_batches
        return data

    return build


if __name__ == "__main__":
    fail_at, fail_rank, *flags = sys.argv[1:]
    loop.build_data = failing_data(loop.build_data, int(fail_at), int(fail_rank))
    sys.exit(record(train_main)(flags))
