"""The trace layer, torch-free, below analysis/ and plugin_copy/: the vocabulary of torch.profiler traces, the table
of their sources, where traces live and how they are found, bounded reads, atomic writes, streamed JSON, and the
worker policy."""
