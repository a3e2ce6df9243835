"""A command's ``main(argv)`` run inside the test process: its exit code, stdout and stderr, as a subprocess of
it would give them, without the cost of a new interpreter (docs/testing.md, "Test suite cost"). Each command
keeps at least one real subprocess test of its one-line stderr and exit code 2."""
from __future__ import annotations


def run_main(main, argv, capsys, **kwargs) -> tuple[int, str, str]:
    """``main([str(a) for a in argv], **kwargs)``'s exit code (returned, or raised as SystemExit: by argparse, or
    ``sys.exit``; None is 0 and a message 1, as a process reports them), and what it printed to stdout and
    stderr; what was printed before the call is dropped."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv], **kwargs)
    except SystemExit as e:
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err
