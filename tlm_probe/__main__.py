"""`python -m tlm_probe ...`: the same program as the `tlm` console script (cli.main)."""

from cli import main  # the app lives in the top-level cli module; this entry point only runs it

if __name__ == "__main__":
    main()
