"""The `stepscope` command: main.py dispatches each subcommand; analyze, tensorboard and diff have their command
lines here (train, compare and verify are the demonstration trainer's, in demo/); oneline.py gives every
command its one-line errors, and quick_exit.py ends those that only read traces without the interpreter's
teardown."""
