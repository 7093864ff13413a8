"""Turn folders on disk into the tables the figures draw from. All arithmetic behind a figure lives here.

Three kinds of input (contracts in /work/shared/DESIGN.md and the interfaces note):
- a probe result folder or file (`results.csv|parquet`, optional `matrices.*`, `provenance.json`),
- a comparison folder from `tlm compare` (`compare.json`, `results.csv`, `summary.csv`, `paired.csv`,
  `runs/<arm>-s<seed>/metrics.jsonl`),
- a single run folder from `tlm train` (`config.json` + `metrics.jsonl`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tlm_probe.errors import UserError
from tlm_probe.files.bounded import checked_size
from tlm_probe.files.jsonfile import read_json, read_json_object
from tlm_probe.files.tablefile import TABLE_MAX_BYTES, WHAT, numeric_columns, read_table_file
from tlm_probe.plotting.arms import RUN_NAME
from tlm_probe.plotting.folder_checks import (
    check_diff_tables,
    check_trust_table,
    read_diff_summary,
    read_trust_summary,
)
from tlm_probe.result_checks import check_compare_table, check_losses
from tlm_probe.results import (
    METRICS_FILE,
    ProbeResult,
    is_trust_folder,
    read_agreement,
    read_metrics,
    read_results,
)
from tlm_probe.schedules.widths import make_schedule, parse_schedule

LOSS_KEYS = ("train_loss", "val_loss")
COMPARE_TABLES = ("results", "summary", "paired")
# the columns of a comparison's tables that hold words; every other column holds numbers
TEXT_COLUMNS = ("arm", "mixer", "schedule", "baseline", "d_ff", "heads", "kv_heads", "shape", "ratio")
EVAL_REQUIRED = ("model", "task", "metric", "value")


def _is_probe(p: Path) -> bool:
    if p.is_file():
        return p.suffix in (".csv", ".parquet") and not (p.parent / "compare.json").is_file()
    return (p / "results.parquet").is_file() or ((p / "results.csv").is_file() and
                                                   (p / "provenance.json").is_file())


def _is_eval(p: Path) -> bool:
    """A `tlm eval` result: results + provenance that names the lm_eval version."""
    prov = p / "provenance.json"
    if not (p.is_dir() and prov.is_file() and (p / "results.csv").is_file()):
        return False
    try:
        doc = read_json(prov)
    except UserError:
        return False  # not an eval result; the probe reader names what is wrong with the file
    versions = doc.get("versions") if isinstance(doc, dict) else None
    return isinstance(versions, dict) and "lm_eval" in versions


def _is_compare(p: Path) -> bool:
    return p.is_dir() and ((p / "compare.json").is_file() or (p / "runs").is_dir())


def _is_run(p: Path) -> bool:
    return p.is_dir() and (p / "metrics.jsonl").is_file()


def _is_diff(p: Path) -> bool:
    return p.is_dir() and (p / "diff.json").is_file()


# order matters: a comparison folder also holds results.csv, so it is recognised before a probe folder
INPUT_KINDS: tuple[tuple[str, Callable[[Path], bool]], ...] = (
    ("compare", _is_compare),
    ("diff", _is_diff),
    ("trust", is_trust_folder),
    ("run", _is_run),
    ("eval", _is_eval),
    ("probe", _is_probe),
)


def input_kind(path: str | Path) -> str:
    """'probe' | 'compare' | 'run' | 'eval' | 'diff' | 'trust' for a path, or a UserError that says what
    was expected."""
    if not isinstance(path, str | Path):  # tp.plot of a table in memory, for a figure of folders
        raise UserError(f"a {type(path).__name__} in memory is drawn by the probe figures (depth, "
                        "importance, heatmap, trajectory); this one takes folders")
    p = Path(path)
    if not p.exists():
        raise UserError(f"input not found: {p}")
    for kind, test in INPUT_KINDS:
        if test(p):
            return kind
    raise UserError(f"{p} is not a probe result or tlm eval result (results.csv + provenance.json), a "
                    "comparison folder (compare.json), a run folder (metrics.jsonl), a tlm diff folder "
                    "(diff.json) or a tlm trust folder (trust.json, trust.csv, values.csv)")


@dataclass
class Comparison:
    path: Path
    tables: dict[str, pd.DataFrame]
    curves: pd.DataFrame
    info: dict = field(default_factory=dict)
    probes: list[Path] = field(default_factory=list)
    """Probe result folders inside the comparison (`tlm demo` writes OUT/probe/<arm>-s<seed>/)."""


def load_probe(path: str | Path) -> ProbeResult:
    df, matrices, provenance = read_results(path)  # the result contract's reader is the one source of truth
    return ProbeResult(df, matrices, provenance or {}, Path(path), read_agreement(path))


def merge_probes(probes: Sequence[ProbeResult]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """One result table (and matrix table) over several inputs. A model name that occurs in more than one
    input is named after its folder in every input that has it ('uniform-s0 (demoA/probe/uniform-s0)'),
    so two probes of one model stay two lines that say where they came from. A `split` column holds the
    data split each input's provenance names."""
    holders: dict[str, list[int]] = {}
    for k, pr in enumerate(probes):
        for m in pr.table["model"].astype(str).unique():
            holders.setdefault(m, []).append(k)
    names = {m: _folder_names(m, [probes[k].path for k in ks]) for m, ks in holders.items() if len(ks) > 1}
    results, matrices = [], []
    for k, pr in enumerate(probes):
        rename = {m: names[m][holders[m].index(k)] if m in names else m
                  for m in pr.table["model"].astype(str).unique()}
        table = pr.table.assign(model=pr.table["model"].astype(str).map(rename))
        if "split" not in table:  # the data split each probe ran on, for titles and the mixed-split note
            table = table.assign(split=str((pr.provenance.get("data") or {}).get("split") or "unknown"))
        results.append(table)
        if pr.matrices is not None and not pr.matrices.empty:
            mat = pr.matrices.assign(model=pr.matrices["model"].astype(str))
            matrices.append(mat.assign(model=mat["model"].map(lambda m, r=rename: r.get(m, m))))
    return pd.concat(results, ignore_index=True), (pd.concat(matrices, ignore_index=True) if matrices
                                                   else None)


def _folder_names(model: str, paths: list) -> list[str]:
    """'<model> (<tail>)' for each path, with the shortest path tails that tell all of them apart;
    '<model> [k]' when no tail does (the same folder given twice)."""
    parts = [Path(p).resolve().parts if p is not None else () for p in paths]
    for n in range(1, max(map(len, parts)) + 1):
        tails = ["/".join(ps[-n:]) for ps in parts]
        if len(set(tails)) == len(tails) and model not in tails:
            return [f"{model} ({t})" for t in tails]
    return [f"{model} [{k}]" for k in range(1, len(paths) + 1)]


def loss_table(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Long table `arm, seed, step, tokens, metric, value` of the losses of several run folders."""
    frames = []
    for run in map(Path, run_dirs):
        metrics = pd.DataFrame(read_metrics(run))
        match = RUN_NAME.match(run.name)
        arm, seed = (match["arm"], int(match["seed"])) if match else (run.name, 0)
        for key in LOSS_KEYS:
            if key in metrics.columns and {"step", "tokens"} <= set(metrics.columns):
                losses = _losses(metrics, key, run / METRICS_FILE)
                frames.append(losses.assign(arm=arm, seed=seed, metric=key))
    if not frames:
        return pd.DataFrame(columns=["arm", "seed", "step", "tokens", "metric", "value"])
    return pd.concat(frames, ignore_index=True)[["arm", "seed", "step", "tokens", "metric", "value"]]


def _losses(metrics: pd.DataFrame, key: str, where: Path) -> pd.DataFrame:
    """`step, tokens, value` of one loss of a metrics.jsonl, checked (a word, an inf or a negative step
    is one UserError naming the file)."""
    rows = metrics.loc[metrics[key].notna(), ["step", "tokens", key]].rename(columns={key: "value"})
    numeric_columns(rows, where, ["step", "tokens", "value"])
    check_losses(rows, where)
    return rows


def curve_summary(losses: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample std (ddof 1; 0 for one seed) over seeds at each step of each arm and metric.

    Grouping is by step, not tokens, because seeds log at the same steps; x is the mean token count."""
    groups = losses.groupby(["arm", "metric", "step"], sort=False)
    out = groups.agg(tokens=("tokens", "mean"), mean=("value", "mean"), std=("value", "std"),
                     n_seeds=("seed", "nunique")).reset_index()
    out["std"] = out["std"].fillna(0.0)
    return out


def _run_order(runs: list[Path], results: pd.DataFrame | None) -> list[Path]:
    """Arms in the comparison's own order (baseline first), then by seed; unknown arms last."""
    known = results is not None and "arm" in results  # a comparison with no finished run: a blank table
    arms = list(dict.fromkeys(results["arm"].astype(str))) if known else []

    def key(run: Path):
        m = RUN_NAME.match(run.name)
        arm, seed = (m["arm"], int(m["seed"])) if m else (run.name, 0)
        return (arms.index(arm) if arm in arms else len(arms), arm, seed)

    return sorted(runs, key=key)


def load_comparison(path: str | Path) -> Comparison:
    p = Path(path)
    tables = {n: read_table(p / f"{n}.csv", TEXT_COLUMNS) for n in COMPARE_TABLES
              if (p / f"{n}.csv").is_file()}
    for name, table in tables.items():  # ranges, finiteness, rows (result_checks.py)
        check_compare_table(name, table, p / f"{name}.csv")
    info = read_json_object(p / "compare.json") if (p / "compare.json").is_file() else {}
    runs = [r for r in (p / "runs").glob("*") if _is_run(r)] if (p / "runs").is_dir() else []
    runs = _run_order(runs, tables.get("results"))
    probes = sorted(d for d in (p / "probe").glob("*") if _is_probe(d)) if (p / "probe").is_dir() else []
    return Comparison(p, tables, curve_summary(loss_table(runs)), info, probes)


def load_eval(path: str | Path) -> pd.DataFrame:
    """The tidy `tlm eval` table (model, task, metric, value, stderr, n)."""
    return read_table(Path(path) / "results.csv", ("model", "task", "metric"), required=EVAL_REQUIRED)


def read_table(path: Path, text: Sequence[str], required: Sequence[str] = ()) -> pd.DataFrame:
    """A CSV whose every column outside `text` holds numbers (empty cells are NaN): a corrupt file, a
    missing column or a word where a number belongs is one UserError naming the file, the column and
    the cell, not a table drawn or printed as if nothing were wrong."""
    # compare writes a table with no rows as a blank line
    small = checked_size(path, TABLE_MAX_BYTES, WHAT) <= 64
    if not required and small and not path.read_bytes().strip():
        return pd.DataFrame()
    df = read_table_file(path)  # bounded: size before reading; a corrupt file is one UserError
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise UserError(f"{path} is not a tlm table: no column {missing[0]!r}")
    numeric_columns(df, path, [c for c in df.columns if c not in text])
    return df


DIFF_TABLES = {"cka.csv": (("model", "statistic"), ("layer_i", "layer_j", "value")),
               "layers.csv": (("model", "statistic"), ("layer", "depth", "value")),
               "tokens.csv": (("model", "bucket_kind", "bucket"), ("kl_mean", "dnll_mean", "n"))}
"""A `tlm diff` folder's tidy tables: their word columns, and the number columns drawn."""


def load_diff(path: str | Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    """diff.json (bounded read) and the tidy tables of a `tlm diff` folder, checked (folder_checks.py)."""
    p = Path(path)
    summary = read_diff_summary(p)
    n_a, n_b = summary["n_layers"]
    tables = {name: read_table(p / name, text, required=(*text, *numbers))
              for name, (text, numbers) in DIFF_TABLES.items()}
    check_diff_tables(tables, n_a, n_b, p)
    return summary, tables


TRUST_REQUIRED = ("statistic", "kendall_w", "min_pairwise_spearman", "spearman_with_target", "flags")
"""trust.csv's columns (trust/engine.py; spearman_with_task where a task target was scored)."""


def load_trust(path: str | Path) -> tuple[dict, pd.DataFrame]:
    """trust.json (bounded read) and trust.csv of a `tlm trust` folder."""
    p = Path(path)
    summary = read_trust_summary(p)
    table = read_table(p / "trust.csv", ("statistic", "flags"), required=TRUST_REQUIRED)
    check_trust_table(table, p)
    summary["model"] = summary.get("model") or p.name  # a folder written before trust.json named its model
    return summary, table


def load_run(path: str | Path) -> Comparison:
    """A single run folder, shaped like a one-arm comparison with one seed."""
    p = Path(path)
    return Comparison(p, {}, curve_summary(loss_table([p])), {})


LOADERS: dict[str, Callable[[Path], object]] = {
    "probe": load_probe, "compare": load_comparison, "run": load_run, "eval": load_eval, "diff": load_diff,
    "trust": load_trust}
"""Each input kind's reader: what a figure or a report section reads, checked (ranges, finiteness, rows)."""


def check_input_folders(paths: Sequence[str | Path]) -> None:
    """Every input folder read and checked as its figure or section reads it, before `tlm plot` and `tlm
    report` import matplotlib and seaborn (~2 s): a bad file is refused in about a second, not after them.
    A path that does not exist is left to the figure (the schedules figure takes names, not paths)."""
    for p in map(Path, paths):
        if p.exists():
            LOADERS[input_kind(p)](p)


def schedule_table(names: Sequence[str], n_layers: int, d_ff: int, multiple_of: int = 64) -> pd.DataFrame:
    """Tidy `schedule, layer, width` for schedule specs such as 'cosine:1.5:0.5' or 'wider-early'."""
    rows = []
    for name in names:
        sched = make_schedule(parse_schedule(name, multiple_of), n_layers, d_ff)
        rows += [{"schedule": name, "layer": l, "width": w} for l, w in enumerate(sched.widths)]
    return pd.DataFrame(rows, columns=["schedule", "layer", "width"])


def advantage_curves(path: str | Path, metric: str = "val_loss") -> pd.DataFrame:
    """Each arm minus the comparison's baseline arm, paired by seed at each logged step: the curve table
    (`arm, metric, tokens, mean, std, n_seeds`; metric '<metric> − <baseline>'). Negative: the arm is
    ahead. One mixer's comparison (one baseline)."""
    p = Path(path)
    info = read_json_object(p / "compare.json") if (p / "compare.json").is_file() else {}
    baseline = info.get("baseline", "uniform")
    if not isinstance(baseline, str):
        raise UserError(f"{p} compares several mixers; the advantage figure takes one mixer's comparison")
    runs = [r for r in (p / "runs").glob("*") if _is_run(r)] if (p / "runs").is_dir() else []
    losses = loss_table(runs)
    losses = losses[losses["metric"] == metric]
    if baseline not in set(losses["arm"]):
        raise UserError(f"{p} has no {metric} of its baseline arm {baseline!r} to compare with")
    base = losses[losses["arm"] == baseline][["seed", "step", "value"]].rename(columns={"value": "base"})
    paired = losses[losses["arm"] != baseline].merge(base, on=["seed", "step"])  # same seed, same step
    paired = paired.assign(value=paired["value"] - paired["base"], metric=f"{metric} − {baseline}")
    return curve_summary(paired[["arm", "seed", "step", "tokens", "metric", "value"]])


def split_note(results: pd.DataFrame) -> list[str]:
    """A warning when the probes ran on different data splits (a train-split probe beside val-split ones
    measures other tokens): empty when they agree."""
    if "split" not in results:
        return []
    by_split = results.groupby(results["split"].astype(str))["model"].agg(lambda m: list(dict.fromkeys(m)))
    if len(by_split) < 2:
        return []
    parts = "; ".join(f"{split}: {', '.join(map(str, models))}" for split, models in by_split.items())
    return [f"warning: these probes ran on different data splits ({parts}); their values are not "
            "measurements on the same tokens"]


def lacking_notes(table: pd.DataFrame, models, stat: str, what: str = "results") -> list[str]:
    """The note for models left out of a figure because they lack `stat` (with no model at all the
    figure is not drawn and its plotting function says what is available)."""
    have = set(table.loc[table["statistic"] == stat, "model"].astype(str))
    lacking = [m for m in dict.fromkeys(map(str, models)) if m not in have]
    return [f"skipped {', '.join(lacking)}: no {stat} in its {what}"] if have and lacking else []
