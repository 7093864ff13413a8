"""The probe: ProbeOptions -> load -> stream -> reduce -> write (engine.py; what is computed: plan.py; the
first pass: stream.py; the importance pass: second_pass.py), the rows computed after the stream (rows.py),
and probing a run's kept checkpoints (checkpoints.py)."""

from tlm_probe.public_call import make_callable

make_callable(__name__)  # tp.probe(...) is tlm_probe.api.library.probe
