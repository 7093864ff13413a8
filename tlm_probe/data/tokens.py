"""Token files: our uint32 shards (a 256-byte header, then the ids), plus .npy and .pt arrays.

Shard layout: 8 magic bytes b"TLMTOK01", then a JSON header padded with spaces to 256 bytes in total
({"dtype": "uint32", "vocab_size", "tokenizer_hash", "n_tokens", "n_bytes"}), then n_tokens little-endian
uint32 ids. uint32 because 128k vocabularies do not fit uint16. The ids are memory-mapped, never copied.
A prepared folder (from `tlm data prepare`) has train/ and val/ subfolders of shards and meta.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tlm_probe.errors import UserError
from tlm_probe.files.fileio import atomic_path
from tlm_probe.files.jsonfile import int_field, loads_bounded

MAGIC = b"TLMTOK01"
HEADER_BYTES = 256
SHARD_SUFFIX = ".tok"
DTYPE = np.dtype("<u4")
PREPARED_SPLITS = ("train", "val", "test")
"""Subfolders of a prepared folder ("all" is every one present; test/ only for a source that has one)."""


def write_shard(
    path: str | Path, ids: np.ndarray, vocab_size: int, tokenizer_hash: str, n_bytes: int
) -> Path:
    """Write one shard atomically (temporary file in the same folder + rename)."""
    path = Path(path)
    ids = np.ascontiguousarray(ids, dtype=DTYPE)
    if ids.size and int(ids.max()) >= vocab_size:
        raise UserError(f"token id {int(ids.max())} is outside the vocabulary of size {vocab_size}")
    header = {
        "dtype": "uint32",
        "vocab_size": int(vocab_size),
        "tokenizer_hash": tokenizer_hash,
        "n_tokens": int(ids.size),
        "n_bytes": int(n_bytes),
    }
    blob = json.dumps(header).encode()
    if len(blob) > HEADER_BYTES - len(MAGIC):
        raise UserError("shard header too long (tokenizer hash too long?)")
    with atomic_path(path, HEADER_BYTES + ids.nbytes) as tmp, tmp.open("wb") as f:
        f.write(MAGIC + blob.ljust(HEADER_BYTES - len(MAGIC), b" "))
        f.write(ids.tobytes())
    return path


def read_shard_header(path: str | Path) -> dict:
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES or not head.startswith(MAGIC):
        raise UserError(f"{path} is not a tlm token shard (bad magic or truncated header)")
    try:
        header = loads_bounded(head[len(MAGIC) :], f"{path}'s shard header")  # UTF-8, nesting (issue 36)
    except UserError as e:
        raise UserError(f"{path} has a corrupt shard header ({e})") from None
    if not isinstance(header, dict):
        raise UserError(f"{path} has a corrupt shard header (not a JSON object)")
    int_field(header, "n_tokens", f"{path}: its shard header")
    expected = HEADER_BYTES + header["n_tokens"] * DTYPE.itemsize
    if path.stat().st_size != expected:
        raise UserError(f"{path} is truncated: {path.stat().st_size} bytes, header says {expected}")
    return header


def read_shard(path: str | Path) -> np.ndarray:
    header = read_shard_header(path)
    if header["n_tokens"] == 0:
        return np.zeros(0, dtype=np.uint32)
    return np.memmap(path, dtype=DTYPE, mode="r", offset=HEADER_BYTES, shape=(header["n_tokens"],))


def max_id(ids: np.ndarray, chunk: int = 1 << 24) -> int:
    """The largest id of a (memory-mapped) array, read in chunks so a corpus never sits in memory whole."""
    return max((int(ids[i : i + chunk].max()) for i in range(0, len(ids), chunk)), default=-1)


def check_shard_ids(folder: Path, vocab_size: int, where: str) -> None:
    """Every id in the shards of a prepared folder is below its vocab_size (one pass over the memory maps:
    an id past the embedding table would fail mid-training as an IndexError)."""
    for f in [f for s in PREPARED_SPLITS for f in shard_files(folder / s)]:
        top = max_id(read_shard(f))
        if top >= vocab_size:
            raise UserError(f"{f} holds token id {top}, outside the vocab_size {vocab_size} of {where}")


def shard_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{SHARD_SUFFIX}"))


def is_prepared(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "meta.json").is_file() and (p / "train").is_dir()


class ConcatIds:
    """Several memory-mapped shards read as one 1-D sequence, without copying them into memory: a 26B-token
    corpus is 104 GB of uint32. Supports len() and contiguous slices (what the batch order needs)."""

    def __init__(self, parts: list[np.ndarray]):
        self.parts = [p for p in parts if len(p)]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise IndexError("ConcatIds supports contiguous slices only")
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        pieces, pos = [], start
        for i in range(max(first, 0), len(self.parts)):
            if pos >= stop:
                break
            lo = pos - int(self.starts[i])
            hi = min(stop, int(self.starts[i + 1])) - int(self.starts[i])
            pieces.append(self.parts[i][lo:hi])
            pos = int(self.starts[i]) + hi
        return np.concatenate(pieces) if len(pieces) != 1 else np.asarray(pieces[0])


def lazy_token_ids(path: str | Path, split: str) -> np.ndarray | ConcatIds:
    """Like load_token_ids for a prepared folder, but many shards stay separate memory maps."""
    path = Path(path)
    subs = PREPARED_SPLITS if split == "all" else (split,)
    files = [f for s in subs for f in shard_files(path / s)]
    if len(files) <= 1:
        return load_token_ids(path, split)
    return ConcatIds([read_shard(f) for f in files])


def _load_npy(path: Path) -> np.ndarray:
    with path.open("rb") as f:
        if f.read(6) != b"\x93NUMPY":  # numpy would call any other file "pickled data"
            raise UserError(f"{path} is not a .npy file (no NumPy header)")
    try:  # an object (pickled) array, a truncated file: one line each
        ids = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        if "object" in str(e).lower():
            raise UserError(f"{path} holds Python objects (dtype object), not integer token ids") from None
        raise UserError(f"cannot read {path} as a NumPy array of ids: {str(e).splitlines()[0]}") from None
    return ids


def _load_pt(path: Path) -> np.ndarray:
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # weights_only refuses anything but tensors and plain containers
        raise UserError(f"cannot read token tensor {path}: {str(e).splitlines()[0]}") from None
    if not isinstance(obj, torch.Tensor):
        raise UserError(f"{path} does not hold a single tensor of token ids")
    return obj.numpy()


def _load_folder(path: Path, split: str) -> np.ndarray:
    if is_prepared(path):
        subs = PREPARED_SPLITS if split == "all" else (split,)
        files = [f for s in subs for f in shard_files(path / s)]
    else:
        files = shard_files(path)
    if not files:
        raise UserError(f"no token shards ({SHARD_SUFFIX}) in {path}")
    parts = [read_shard(f) for f in files]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


_LOADERS = {".npy": _load_npy, ".pt": _load_pt, ".pth": _load_pt, SHARD_SUFFIX: read_shard}


def load_token_ids(path: str | Path, split: str = "all") -> np.ndarray:
    """A 1-D uint32 array of token ids from a .npy, .pt, shard file, shard folder or prepared folder.

    `split` (train | val | all) selects subfolders of a prepared folder and is ignored for single files.
    A 2-D array (sequences x tokens) is read row after row; load_token_rows keeps its rows.
    """
    return load_token_rows(path, split).reshape(-1)


def load_token_rows(path: str | Path, split: str = "all") -> np.ndarray:
    """Like load_token_ids, but a 2-D array keeps its shape: its rows are separate sequences (a batch of
    tokenised documents, e.g. [CLS] ... [SEP] per row). More than 2 dimensions is an error."""
    path = Path(path)
    if path.is_dir():
        ids = _load_folder(path, split)
    elif path.is_file() and path.suffix in _LOADERS:
        ids = _LOADERS[path.suffix](path)
    elif path.is_file():
        raise UserError(f"{path}: unknown token file type {path.suffix!r} (use .npy, .pt or {SHARD_SUFFIX})")
    else:
        raise UserError(f"token file not found: {path}")
    return _as_ids(ids, path)


def _as_ids(ids: np.ndarray, path: Path) -> np.ndarray:
    if ids.ndim > 2:
        raise UserError(
            f"{path} holds a {ids.ndim}-D array {tuple(ids.shape)}; token ids must be 1-D (a stream) or "
            "2-D (one sequence per row)"
        )
    if ids.size == 0:
        raise UserError(f"{path} holds no tokens")
    if ids.dtype == DTYPE or ids.dtype == np.uint32:
        return ids
    if not np.issubdtype(ids.dtype, np.integer):
        raise UserError(f"{path} holds {ids.dtype} values, not integer token ids")
    if int(ids.min()) < 0:
        raise UserError(f"{path} holds a negative token id ({int(ids.min())}); token ids are >= 0")
    if int(ids.max()) > np.iinfo(np.uint32).max:
        raise UserError(f"{path} holds token id {int(ids.max())}, above the uint32 range")
    return ids.astype(np.uint32)
