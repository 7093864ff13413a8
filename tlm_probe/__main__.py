"""`python -m tlm_probe ...`: the same program as the `tlm` console script (tlm_probe.cli.main)."""

from tlm_probe.cli import main

if __name__ == "__main__":
    main()
