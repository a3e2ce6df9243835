"""stepscope's profiler: capture/ records, trace/ reads and finds traces, analysis/ says why a step is slow,
tbfix/ makes traces truthful for torch-tb-profiler, serve/ shows runs in TensorBoard, cli/ holds the commands."""
