"""`tlm diff A B`: where two models differ, streamed over a corpus (options.py: DiffOptions; engine.py)."""
