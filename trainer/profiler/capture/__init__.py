"""Recording a run: the profiler's options and build, the trace writer and the drop-in handler, phases, flame graphs."""
