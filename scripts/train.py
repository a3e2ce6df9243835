"""Train a small CIFAR-style ResNet, optionally under torch.profiler, and log the run to TensorBoard.

    python scripts/train.py --profile                     # resnet8 on synthetic data; < 1 min on 2 CPU cores
    python scripts/train.py --profile --arch resnet18 --batch-size 128     # on a GPU
    python scripts/train.py --profile --ops custom        # our CUDA elementwise kernels (kernels/)
    python scripts/train.py --cuda-graphs                 # whole-step CUDA graph
    python scripts/train.py --compile reduce-overhead
    torchrun --nproc_per_node 2 scripts/train.py --profile    # DDP; --batch-size is per rank
    tensorboard --logdir logs

Prints a progress bar (loss, images/s), and at the end a summary line; with --profile also the top-5 ops
table, the TensorBoard command and the diagnosis (why the step is slow). Writes logs/<run>/: TensorBoard
events, run.json, and with --profile the traces (see trainer/trace/files.py) and diagnosis.md.
Bad flags (or a full disk under --logdir): one line on stderr, exit code 2, nothing half-written. Ctrl-C or
SIGTERM: the cycle's trace and the scalars flushed, run.json "interrupted", exit code 130 or 143.
Under torchrun each rank checks its flags the same way; a rank that fails ends the whole group, and
torchrun's summary shows that rank's traceback as the root cause.
"""

import os
import sys

# c10 (torch's C++ core) reads its log level once, when torch is imported. At its default, WARNING, a profiled
# run prints "[W... CPUAllocator.cpp] Memory block of unknown size was allocated before the profiling started"
# into the progress bar: --profile-memory cannot account for a tensor allocated before the cycle began, which
# every run has (the data set, the weights). Errors still print; TORCH_CPP_LOG_LEVEL=WARNING brings the rest back.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from stepscope.cli.main import train_main  # noqa: E402

if __name__ == "__main__":
    if "TORCHELASTIC_ERROR_FILE" in os.environ:
        # under torchrun: an uncaught exception is also written to the error file that torchrun reports
        from torch.distributed.elastic.multiprocessing.errors import record

        sys.exit(record(train_main)())
    sys.exit(train_main())
