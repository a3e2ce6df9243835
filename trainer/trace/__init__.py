"""The trace layer, torch-free, below analysis/ and tbfix/: the vocabulary of torch.profiler traces, the table
of their sources, where traces live and how they are found, bounded reads, atomic writes, streamed JSON, and the
worker policy."""
