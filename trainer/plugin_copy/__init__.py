"""Truthful traces for TensorBoard's PyTorch Profiler tab (torch-tb-profiler 0.4.3) on modern PyTorch.

    from stepscope.plugin_copy import write_adapted_pair, export_file, export_tensorboard
    write_adapted_pair(run_dir, worker, span, trace)             # original under raw/, adapted copy listed
    export_file(run_dir, worker, span, path, gz=True)            # the same from a trace file, streamed
    export_tensorboard(Path("plain_run"), Path("logs/fixed"))    # a plain tensorboard_trace_handler run

``python scripts/analyze.py RUN_DIR --export-tensorboard OUT_DIR`` calls the last one; then
``tensorboard --logdir OUT_DIR`` shows operator device time, Runtime, DataLoader and call stacks.
"""

from stepscope.plugin_copy.export import export_file, export_tensorboard, write_adapted_pair

__all__ = ["export_file", "export_tensorboard", "write_adapted_pair"]
