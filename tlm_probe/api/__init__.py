"""The public Python API (`import tlm_probe as tp`; the names are lazy attributes of tlm_probe itself):
the library side of the commands (library.py), and a loaded model under the contract's names (handle.py)."""
