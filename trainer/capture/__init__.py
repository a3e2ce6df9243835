"""Recording a run: the profiler's options and build, the trace writer and the drop-in handler, phases, flame graphs,
and for anyone's loop the schedule that times the unprofiled steps (schedule), the loader wrapper (loader), what
starts a capture (triggers), the handler's background work (cycle_worker, cycle_summary) and the one-line
`stepscope.profile` (session). docs/loops.md shows them in use."""
