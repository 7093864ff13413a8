"""Golden tables: probe tiny models of every family (alignment + importance) and save the numbers.

    PYTHONPATH=$PWD python tests/golden/make_golden.py [OUT_DIR]

Writes results.csv and matrices.csv (all families, one file each) into OUT_DIR (default: this folder).
Everything is seeded: the zoo models (tests/models_zoo.py, seed 0), a tiny tapered tlm model (seed 0) and
the token ids (numpy seed 0). tests/test_golden.py re-runs this and compares with the committed CSVs, so a
refactor that changes a number shows up as a failing test.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # models_zoo

from models_zoo import FAMILIES, VOCAB, build_model  # noqa: E402

N_TOKENS, SEQ_LEN, BATCH = 320, 32, 4
IMPORTANCE = {"grad_sequences": 4, "sample_size": 256, "pool_size": 64}


def _tlm(folder: Path) -> Path:
    from tlm_probe.models.config import config_with_schedule
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM
    from tlm_probe.schedules.widths import parse_schedule

    torch.manual_seed(0)
    cfg = config_with_schedule(
        parse_schedule("cosine:1.5:0.5", 16),
        64,
        d_model=32,
        n_layers=4,
        n_heads=2,
        vocab_size=256,
        max_seq_len=64,
    )
    save_tlm(TaperedLM(cfg), folder)
    return folder


def build_all(root: Path, families=None) -> dict[str, tuple[Path, int]]:
    """family -> (model folder, vocabulary size)"""
    wanted = [*FAMILIES, "tlm"] if families is None else families
    out = {f: (build_model(f, root / f), VOCAB) for f in FAMILIES if f in wanted}
    if "tlm" in wanted:
        out["tlm"] = (_tlm(root / "tlm"), 256)
    return out


def token_file(root: Path, vocab: int) -> Path:
    path = root / f"ids-{vocab}.npy"
    if not path.exists():
        np.save(path, np.random.default_rng(0).integers(5, vocab, N_TOKENS).astype(np.uint32))
    return path


def _as_layer_rows(agreement: pd.DataFrame | None) -> pd.DataFrame | None:
    """agreement.csv rows in the layout the golden table keeps them in (from before agreement.csv): layer
    -1, n_tokens = the number of layers compared."""
    if agreement is None:
        return None
    return agreement.assign(layer=-1, n_tokens=agreement["n_layers"])[
        ["model", "layer", "statistic", "value", "ci_low", "ci_high", "n_tokens"]]


def golden_tables(root: Path, families=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    from tlm_probe.api.library import probe

    tables, mats = [], []
    for family, (folder, vocab) in build_all(root, families).items():
        for stats in ("all", "alignment"):
            try:
                res = probe(
                    str(folder),
                    str(token_file(root, vocab)),
                    stats=stats,
                    seq_len=SEQ_LEN,
                    batch_size=BATCH,
                    max_tokens=None,
                    importance=dict(IMPORTANCE),
                    full=True,
                )
                break
            except Exception as e:  # noqa: BLE001  (what the code of the day cannot probe: no golden row)
                print(f"{family} --stats {stats}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        table = pd.concat([res.table, _as_layer_rows(res.agreement)], ignore_index=True)
        tables.append(table.assign(model=family))
        if res.matrices is not None:
            mats.append(res.matrices.assign(model=family))
    return pd.concat(tables, ignore_index=True), pd.concat(mats, ignore_index=True)


def main(out: Path) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        table, mats = golden_tables(Path(tmp))
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "results.csv", index=False, float_format="%.17g")
    mats.to_csv(out / "matrices.csv", index=False, float_format="%.17g")
    print(f"wrote {out}/results.csv ({len(table)} rows), matrices.csv ({len(mats)} rows)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
