"""The command lines of `stepscope analyze` and `stepscope tensorboard`, and the one-line argument parser."""
