"""Recording a run: the profiler's options, the demonstration trainer's profiler (profiler: the shared schedule and
handler plus its extras), the drop-in handler, phases, flame graphs, the one telemetry type (telemetry), and for
anyone's loop the schedule that times the unprofiled steps (schedule), the loader wrapper (loader), what
starts a capture (triggers), the handler's background work (cycle_worker, cycle_summary) and the one-line
`stepscope.profile` (session). docs/loops.md shows them in use."""
