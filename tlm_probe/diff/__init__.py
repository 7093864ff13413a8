"""`tlm diff A B`: where two models differ, streamed over a corpus (options.py: DiffOptions; engine.py)."""

from tlm_probe.public_call import make_callable

make_callable(__name__)  # tp.diff(...) is tlm_probe.api.library.diff
