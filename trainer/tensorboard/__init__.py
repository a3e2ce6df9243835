"""Showing a run: TensorBoard event files, the diagnosis as Text and Scalars, the shadow logdir and its server."""
