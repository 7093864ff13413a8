"""Study 1's re-trained runs scored on study 1's own outcome too (issue 44 part 4; post hoc).

35 of the 36 re-trained runs reproduce study 1's bit for bit; uniform-s0 parted from it in one float32 unit at
step 30 (docs/studies/study2.md, "Re-scoring study 1").
The queue (analyses/confirm_rescore.py, from the pinned worktree) scores each on study 2's outcome only.
This scores each finished one on study 1's outcome as well (the first 262,144 test tokens, with the
registered arguments SCORES["test_prefix.csv"]), from the final weights the queue keeps, and adds
test_prefix.csv and its provenance to its committed folder, so that the re-trained runs' contrasts can be set
beside study 1's on the outcome study 1 used. Idempotent: a run already scored is skipped.

    python -m analyses.rescore_prefix --root /work/study2/root     # then commit analyses/results/confirm
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from analyses import confirm as study1
from analyses.confirm2 import SCORES

NAME = "test_prefix.csv"


def score(root: Path, results: Path, data: Path) -> list[str]:
    """Score every re-trained run whose committed folder lacks test_prefix.csv; the names scored."""
    done = []
    for dst in sorted(p for p in (results / "runs").glob("*") if (p / "run.json").is_file()):
        if (dst / NAME).is_file():
            continue
        run, ev = root / "rescore1" / "runs" / dst.name, root / "rescore1" / "eval" / dst.name / NAME
        if not (run / "model.safetensors").is_file():
            raise SystemExit(f"error: {run} has no final weights to score")
        if not (ev / "results.csv").is_file():
            study1.tlm("eval", str(run), "--ppl-data", str(data), *SCORES[NAME], "--out", str(ev))
        shutil.copyfile(ev / "provenance.json", dst / NAME.replace(".csv", "_provenance.json"))
        shutil.copyfile(ev / "results.csv", dst / NAME)  # last: its presence marks the run scored
        done.append(dst.name)
    return done


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, required=True, help="the study's root (runs, eval, data)")
    p.add_argument("--results", type=Path, default=study1.RESULTS / "rescore")
    opts = p.parse_args()
    data = study1.data_folder(opts.root)
    if not (data / "meta.json").is_file():
        raise SystemExit(f"error: {data} is not a prepared corpus folder")
    print(f"scored on study 1's outcome: {', '.join(score(opts.root, opts.results, data)) or 'none new'}")


if __name__ == "__main__":
    main()
