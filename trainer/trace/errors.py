"""The one exception the analysis raises on bad input. Torch-free.

    from stepscope.analysis import TraceError
    try: stepscope.analyze(run_dir)
    except TraceError as e: print(f"error: {e}")      # one line naming the file or event and the problem
"""


class TraceError(ValueError):
    """The input is not a torch.profiler trace of training steps; the message says what is wrong."""
