"""Showing a run in TensorBoard: event files, the diagnosis as Text and Scalars, the watcher and shadow logdir of
`stepscope tensorboard` and its server, the stepscope tab (tab/) and the PyTorch Profiler tab's charts drawn
offline (charts/, profiler_tab.py)."""
