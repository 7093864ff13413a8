"""`python cli.py ...` and `torchrun ... cli.py ...` from a checkout: the `tlm` program, whose app lives in
tlm_probe/cli.py (this file is not installed; the console script `tlm` runs tlm_probe.cli:main)."""

from tlm_probe.cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
