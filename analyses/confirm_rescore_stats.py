"""Study 1 re-scored (issue 44 part 4; post hoc, stated as such), from the committed files of its 36
re-trained main runs (results/confirm/rescore/runs/NAME/: test.csv on study 2's primary outcome, written by
the queue; test_prefix.csv on study 1's own outcome, by analyses.rescore_prefix).

- the re-score: study 1's three primary contrasts (paired t-test over its 9 seeds, Holm over three;
  confirm_stats.primary_contrasts) on study 2's primary outcome, 1,048,576 test tokens spread over the
  whole test split;
- beside it, the same contrasts of the re-trained runs on study 1's outcome (the first 262,144 test tokens),
  so that the re-trained runs can be set beside study 1's own runs on the outcome study 1 used.
35 of the 36 re-trained runs reproduce study 1's bit for bit; uniform-s0 does not (docs/studies/study2.md,
"Re-scoring study 1"). No contrast is computed until all 36 are in and scored on both outcomes (is_complete).

    python -m analyses.confirm2 collect     # also writes results/confirm/rescore/{runs.csv,STATUS.md,...}
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from analyses import confirm as study1
from analyses import confirm_stats as cs

RESULTS = study1.RESULTS / "rescore"
OUTCOMES = {"test_nll": "test.csv", "test_prefix_nll": "test_prefix.csv"}
"""Column -> per-run file: study 2's primary outcome (the re-score), study 1's own outcome."""
COLUMNS = ["outcome", *cs.PRIMARY_COLUMNS]


def load_runs(results: Path = RESULTS) -> pd.DataFrame:
    """study 1's run table (confirm_stats.load_runs: test_nll from test.csv) with test_prefix_nll and each
    run's wall-clock times and final weights' hash."""
    df = cs.load_runs(results)
    extra = [_extra(results / "runs" / name) for name in df["name"]]
    return df.assign(**{k: [e[k] for e in extra] for k in ("test_prefix_nll", "started", "ended",
                                                            "model_sha256")})


def _extra(run: Path) -> dict:
    info = json.loads((run / "run.json").read_text())
    prefix = run / OUTCOMES["test_prefix_nll"]
    return {"test_prefix_nll": cs.token_nll(prefix) if prefix.is_file() else np.nan,
            "started": info["started"], "ended": info["ended"], "model_sha256": info["model_sha256"]}


def is_complete(df: pd.DataFrame) -> bool:
    """All 36 main runs re-trained and scored on both outcomes."""
    return cs.is_complete(df) and bool(cs.main_runs(df)["test_prefix_nll"].notna().all())


def contrasts(df: pd.DataFrame) -> pd.DataFrame:
    """Study 1's primary contrasts on each outcome, one block of three rows per outcome (Holm within it)."""
    blocks = [cs.primary_contrasts(df.assign(test_nll=df[col])).assign(outcome=col) for col in OUTCOMES]
    return pd.concat(blocks, ignore_index=True)[COLUMNS]


def status_lines(df: pd.DataFrame, complete: bool) -> list[str]:
    main = cs.main_runs(df)
    scored = int(main["test_prefix_nll"].notna().sum())
    closing = ("All 36 are in and scored on both outcomes: the contrasts are in contrasts.csv and section.md."
               if complete else
               "No contrast is computed until all 36 are in and scored on both outcomes.")
    return ["# Study 1 re-scored: status", "",
            "Made by `python -m analyses.confirm2 collect` from `runs/*` (post hoc; see study 2's "
            "PREREGISTRATION.md, \"Study 1 re-scored\").", "",
            f"- re-trained main runs finished: {len(main)} of {cs.MAIN_RUNS} (scored on study 2's outcome)",
            f"- scored on study 1's outcome too (analyses.rescore_prefix): {scored} of {cs.MAIN_RUNS}", "",
            closing]


def write_all(results: Path = RESULTS) -> dict:
    """runs.csv (test columns only once complete) and STATUS.md always; contrasts.csv and section.md once
    complete. Returns {"contrasts": table} then, {} before."""
    df = load_runs(results)
    complete = is_complete(df)
    flat = df.assign(widths=df["widths"].map(lambda w: " ".join(map(str, w))))
    if not complete:
        flat = flat.drop(columns=list(OUTCOMES))
    flat.to_csv(results / "runs.csv", index=False, float_format="%.6g")
    (results / "STATUS.md").write_text("\n".join(status_lines(df, complete)) + "\n")
    if not complete:
        return {}
    table = contrasts(df)
    table.to_csv(results / "contrasts.csv", index=False, float_format="%.6g")
    from analyses.confirm_rescore_section import section

    original = pd.read_csv(results.parent / "contrasts.csv")
    lines = section(df, table, original, cs.load_runs(results.parent))
    (results / "section.md").write_text("\n".join(lines) + "\n")
    return {"contrasts": table}
