"""The probe: ProbeOptions -> load -> stream -> reduce -> write (engine.py), the rows computed after the
stream (rows.py), and probing a run's kept checkpoints (checkpoints.py)."""
