"""Files and folders: the one bounded reader per format, atomic writes, manifests with content hashes,
ownership (what tlm wrote, so --overwrite deletes nothing else), folder locks, the on-disk cache.
Imports nothing of tlm_probe above errors.py."""
