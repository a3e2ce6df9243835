"""Plain, whole-document versions of the engine's streamed passes, that the tests compare it with."""
