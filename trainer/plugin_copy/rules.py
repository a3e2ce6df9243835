"""What the TensorBoard copy of a trace changes, so that torch-tb-profiler 0.4.3 reports true numbers.

    from stepscope.plugin_copy import export_file
    export_file(run_dir, worker, span, Path("t.pt.trace.json"))   # the rewrite: stream_plan.py, stream_write.py

What 0.4.3 gets wrong on torch 2.x traces, and what is rewritten (plugin paths are relative to
``torch_tb_profiler/``, version 0.4.3):

1. Launches are ``cuda_runtime``/``cuda_driver`` events, categories missing from ``EventTypeMap``
   (``profiler/trace.py:38-53``), so ``create_trace_event`` drops them (``trace.py:217-219``). Without
   runtime nodes no kernel reaches an operator (``profiler/event_parser.py:133-160``,
   ``profiler/node.py:113-119``): device self/total time is 0 for every operator, the Runtime bucket is
   empty (``event_parser.py:277-278``) and the launch time falls into "CPU Exec"
   (``event_parser.py:286-290``). Rewritten to the category ``runtime``.
2. A launch outside every operator carries no ``External id`` (``cudaGraphLaunch``,
   ``cudaDeviceSynchronize``), or one of an annotation the plugin drops. The plugin would file it under
   that id and never attach it to a tree (``event_parser.py:86-94``), so its kernels, which 0.4.3
   showed under the call-tree root before, would vanish from the kernel-by-operator table. Its
   ``External id`` becomes 0: the plugin's own convention for "attach to the root"
   (``event_parser.py:156-159``). A call that launched nothing and runs outside every step on the
   host keeps its category, invisible as before: it is not step work (the largest is the profiler's own
   ``cudaDeviceSynchronize`` when it flushes the trace, 14-36 ms on the GPU-bound traces), yet the
   plugin, which moves steps onto the GPU's clock, would file the device-side step time under it, and
   once kernels and runtime cover every step the Overview's split restarts and reports the whole step
   as "Other" (``profiler/overall_parser.py:44-53``: an empty ``slots`` reads as "first role").
3. DataLoader spans (``enumerate(DataLoader)#...__next__``) are ``user_annotation`` events now, and the
   plugin keeps a user annotation only if it is a ``ProfilerStep#`` or a collective
   (``trace.py:189-194``), so the DataLoader bucket (``event_parser.py:279-282``) is 0 and the
   data-loading recommendation (``profiler/data.py:231-239``) never fires. A DataLoader span becomes
   ``cpu_op`` (a ``DataLoaderNode``, ``node.py:296-299``, never listed as an operator) when it nests
   cleanly on its thread; one that straddles an operator would break the thread's call tree
   (``profiler/op_tree.py:446-459``) and is left alone.
4. Operators carry no ``Call stack`` argument (``trace.py:94``); ``with_stack`` now writes separate
   ``python_function`` events. The string is rebuilt from them (see ``stream_callstack.py``).
5. Seeing launches makes the plugin stretch steps to their GPU work, which can leave a step with no GPU
   work of its own zero-length and crash the Overview (see ``step_guard.py``). The few launches that
   would cause it are unlinked from their kernels.
6. Any event without ``name``, or a complete event without ``cat``, fails the whole file
   (``data.py:146``, ``trace.py:188``); such events get an empty name or category, and entries that are
   not JSON objects are dropped.

7. torch 2.11 also records each ``ProfilerStep#N`` on the GPU timeline (``gpu_user_annotation``, seen on
   single-GPU and NCCL DDP runs of our trainer). 0.4.3 takes every event of that name for a step
   (``profiler/event_parser.py``), so it sees steps 17, 17, 18, 18, 19 with zero-length duplicates, and the
   Overview divides by zero (``run_generator.py:87``): the worker does not load at all. The device-side copies
   are renamed ``GPU ProfilerStep#N``; they stay on the GPU timeline of the Trace view.

Everything else passes through unchanged, so every view the plugin showed before is still there. Left
alone on purpose: torch's ``fwdbwd`` flow events. 0.4.3 looks for ``forward_backward``
(``data.py:46``), but renaming them switches on its backward-module builder, which crashes on these
traces (``op_tree.py:292`` -> ``node.py:182``: a backward node without a start time).
"""

from __future__ import annotations

PLUGIN_RUNTIME = "runtime"
PLUGIN_OPERATOR = "cpu_op"
ROOT_EXTERNAL_ID = 0
COLLECTIVES = frozenset(f"{lib}:{op}" for lib in ("nccl", "gloo")
                        for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter"))
DEVICE_STEP_PREFIX = "GPU "  # "GPU ProfilerStep#N": no longer read as a host step by the plugin
UNLINKED_KEY = "stepscope unlinked correlation"  # where a cut correlation id is kept, for the reader


def is_dataloader_span(name: str) -> bool:
    """The plugin's own DataLoader test (``event_parser.py:280-281``, ``node.py:297-298``)."""
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or name.startswith(
        "enumerate(DataPipe)#")
