"""`tlm compare` / `tlm sweep`: train several (mixer x) width schedules x seeds on identical data and budget;
tidy tables and paired.png out. A sweep is a comparison whose arms include a grid of shape x start:end ratio
(--shapes, --ratios); it also writes sweep.csv and the heatmap sweep_heatmap.png."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, err_console, interrupt_code, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import MIXER_FLAGS, Config, with_config_options, with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.commands.tables import print_fitted
from tlm_probe.commands.train import SHOWN as TRAIN_SHOWN
from tlm_probe.commands.train import build_config
from tlm_probe.progress import importing_libraries
from tlm_probe.train.config import TrainConfig

PAPER_ARMS = "uniform,cosine:1.5:0.5,linear:1.5:0.5,sigmoid:1.5:0.5,wider-early,wider-late"
SCHEDULES_HELP = ("Comma-separated schedule specs of the MLP widths, or of named components joined by '+' "
                  "(heads=cosine:1.5:0.5, mlp=cosine+kv=linear:1.5:0.5); uniform is the baseline "
                  f"(default: {PAPER_ARMS}; with --shapes: uniform).")
SWEEP_EXAMPLE = ("tlm sweep --shapes cosine,linear,sigmoid --ratios 1.25:0.75,1.5:0.5,1.75:0.25 "
                 "--seeds 0,1,2 --steps 300 --out runs/sweep")


# one function, two purposes: each command's --help says what it is for
COMPARE_HELP = """Compare a few chosen MLP width allocations (--schedules) against uniform at the same budget.

Train each arm of each mixer with each seed on the same tokens, then test each arm against the uniform arm
of its own mixer with paired seeds (results.csv, summary.csv, paired.csv, compare.json; with two seeds or
more, paired.png draws each seed's difference).

Re-running the same command continues an interrupted comparison where it stopped."""

SWEEP_HELP = """Search a grid of taper shapes x start:end ratios against uniform at the same budget.

Which shape and ratio (--shapes x --ratios) help: everything `tlm compare` writes, plus sweep.csv and
sweep_heatmap.png (each grid arm's paired difference from uniform). Confirm the best arm with `tlm compare`
and more seeds; without --shapes a sweep is a comparison of --schedules.

Re-running the same command continues an interrupted sweep where it stopped."""


def register(app: typer.Typer) -> None:
    compare_cmd = _compare_command()
    command(app, "compare", f"tlm compare --schedules {PAPER_ARMS} --seeds 0,1,2 --steps 300 --out runs/cmp",
            help=COMPARE_HELP)(compare_cmd)
    command(app, "sweep", SWEEP_EXAMPLE, help=SWEEP_HELP)(compare_cmd)


# the TrainConfig fields `tlm compare` offers as flags (per-run fields such as seed and schedule are arms)
COMPARE_FIELDS = (
    "mixer", "preset", "heads_schedule", "kv_schedule", "mem_schedule", "d_model", "n_layers", "n_heads",
    "n_kv_heads", "d_ff", "multiple_of", "seq_len", "batch_size", "grad_accum", "steps", "tokens", "lr",
    "warmup", "eval_interval", "eval_tokens", "eval_sample", "data", "tokenizer", "device", "threads",
    "norm_scaling",
    *MIXER_FLAGS,
)
_SHOWN = {**TRAIN_SHOWN, "steps": {"help": "Optimizer steps per run.", "show": "300"}}


@dataclass(frozen=True, kw_only=True)
class CompareRun(JsonOut):
    """`tlm compare` / `tlm sweep`: the arms, the seeds and where the comparison goes (the model and
    training options are TrainConfig's)."""

    out: Path
    """Comparison folder (runs/, results.csv, ...)."""
    schedules: str | None = field(default=None, metadata={"help": SCHEDULES_HELP})
    """See SCHEDULES_HELP."""
    shapes: str | None = None
    """Sweep grid: shapes (cosine,linear,sigmoid) x --ratios."""
    ratios: str = "1.25:0.75,1.5:0.5,1.75:0.25"
    """Sweep grid: start:end ratios."""
    seeds: str = "0,1,2"
    """Comma-separated seeds (initial weights and batch order)."""
    mixers: str | None = None
    """Comma-separated token mixers: a mixer x schedule grid of arms (overrides --mixer)."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("compare")})
    """See commands/overwrite.py."""
    eval_tasks: str = ""
    """After each run, `tlm eval` these tasks (e.g. pydoc-mc,pydoc-lastword) into RUN/eval/; adds
    task:metric columns to the tables and paired tests."""
    eval_limit: int | None = None
    """Documents per --eval-tasks task (default: all)."""


def _compare_command():
    @with_config_options(TrainConfig, COMPARE_FIELDS, _SHOWN)
    @with_options(run=CompareRun)
    def compare_cmd(
        config: Config = None,
        *,
        run: CompareRun,
        config_flags: dict,
    ):
        """Train each schedule (or each --shapes x --ratios grid arm) of each mixer with each seed on the same
        tokens; write results, summary and paired tests (each arm against the uniform arm of its own mixer;
        a grid also: sweep.csv, sweep_heatmap.png).

        Re-running the same command continues an interrupted comparison where it stopped."""
        base = build_config(config, config_flags)
        with importing_libraries():  # seconds of imports: the first line within a second says so
            from tlm_probe.train.arms import parse_seeds

        out = run.out
        arms = comparison_arms(base, run.schedules, run.shapes, run.ratios, run.mixers)
        seed_list = parse_seeds(run.seeds)
        after_run = eval_hook_for(run.eval_tasks, run.eval_limit)
        result = run_compare(base, arms, seed_list, out, run.overwrite, after_run)
        if result.pop("rank", 0) != 0:  # under torchrun only rank 0 reports
            return
        from tlm_probe.workflows.compare_figures import write_figures

        figures = write_figures(out, sweep=bool(run.shapes))
        if run.json_out:
            print_json(result | figures)
        else:
            print_summary(result)
            for key, path in figures.items():
                console.print(f"{key.replace('_', ' ')}: {path}", markup=False, highlight=False)

    return compare_cmd


def comparison_arms(base, schedules: str | None, shapes: str | None, ratios: str, mixers: str | None) -> list:
    """The arms of `tlm compare` / `tp.compare`: each mixer (--mixers, else the config's) x arm_list's
    schedules; a bad mixer name fails here, with the list of mixers."""
    from tlm_probe.train.arms import make_arms, parse_list

    mixer_list = parse_list(mixers, "mixers") if mixers is not None else [base.mixer]
    for m in mixer_list:
        base.replace(mixer=m)
    return make_arms(mixer_list, arm_list(schedules, shapes, ratios, len(mixer_list)))


def arm_list(schedules: str | None, shapes: str | None, ratios: str, n_mixers: int = 1) -> list[str]:
    """The arms: --schedules as given (default PAPER_ARMS), or uniform + the --shapes x --ratios grid
    followed by any --schedules arms (a grid of one heatmap cell refused)."""
    from tlm_probe.train.arms import parse_list
    from tlm_probe.train.sweep import check_heatmap, grid_arms, parse_ratios

    if not shapes:
        return parse_list(schedules or PAPER_ARMS, "schedules")
    extra = parse_list(schedules, "schedules") if schedules else []
    shape_list, ratio_list = parse_list(shapes, "shapes"), parse_ratios(ratios)
    arms = grid_arms(shape_list, ratio_list, extra)
    check_heatmap(shape_list, ratio_list, n_mixers)
    return arms


def eval_hook_for(tasks: str, limit: int | None):
    """compare's after_run for --eval-tasks (None without tasks), checked before any training, so a bad
    --eval-tasks fails at once."""
    from tlm_probe.eval.columns import eval_hook
    from tlm_probe.eval.run import EvalOptions, check_options

    if not tasks:
        return None
    opts = EvalOptions(tasks=[t.strip() for t in tasks.split(",") if t.strip()], limit=limit)
    check_options(opts)
    return eval_hook(opts)


def run_compare(base, arms, seeds, out: Path, overwrite: bool, after_run=None) -> dict:
    """compare_arms() with progress bars; Ctrl-C saves the running arm and exits 130 (re-run to continue)."""
    from tlm_probe.train import distributed as dist
    from tlm_probe.train.compare import compare_arms

    try:
        result = compare_arms(base, arms, seeds, out, overwrite=overwrite, after_run=after_run)
        result["rank"] = dist.group_rank()
        dist.shutdown()
        return result
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM
        err_console.print(f"interrupted; finished runs and checkpoints are in {out}; re-run to continue")
        raise typer.Exit(interrupt_code(e)) from None


def print_summary(result: dict) -> None:
    base = result["baseline"]
    title = base if isinstance(base, str) else ", ".join(base.values())
    columns = ("arm", "seeds", "params", "val loss", "val ppl", "bpb", "Δ loss vs baseline", "95% CI",
               "p (paired t)", "80% power at |Δ| ≥")
    paired = {p["arm"]: p for p in result["paired"]}
    rows = []
    for s in result["summary"]:
        p = paired.get(s["arm"], {})
        rows.append((s["arm"], str(s["n_seeds"]), f"{s['params']:,}", _pm(s, "val_loss"), _pm(s, "val_ppl"),
                     _pm(s, "val_bpb"), _num(p.get("val_loss_diff_mean"), "+.4f"), _ci(p),
                     _num(p.get("val_loss_p"), ".3g"), _num(p.get("val_loss_detectable"), ".4f")))
    # never cut to the console's width (80 columns in a log): split into tables that fit (commands/tables.py)
    print_fitted(console, f"validation after training (baseline {title})", columns, rows)
    if any((p.get("n_pairs") or 0) < 2 for p in result["paired"]):
        from tlm_probe.report.summary import NOT_EVIDENCE

        console.print(f"warning: {NOT_EVIDENCE}", highlight=False, markup=False)
    _print_eval(result)
    # kv_bytes_per_token: absent from the budget of a comparison written before per-layer heads
    budgets = result["budget"].values()
    counts = {(b["params"], b["flops_per_token"], b.get("kv_bytes_per_token")) for b in budgets}
    if len(counts) == 1:
        params, flops, kv = counts.pop()
        kv_text = "" if kv is None else f", {kv:,} KV-cache bytes per token"
        console.print(f"every arm: {params:,} parameters, {flops:,} training FLOPs per token{kv_text}")
    else:
        console.print("the schedules of each mixer have equal parameters, training FLOPs and KV-cache bytes "
                      "per token")
    _print_mixer_sizes(result)


def _print_mixer_sizes(result: dict) -> None:
    """Each mixer's parameter count, against attention's when attention is one of the arms."""
    sizes = {s["mixer"]: s["params"] for s in result["summary"] if s.get("mixer")}
    if len(sizes) < 2 and "attention" in sizes:
        return
    ref = sizes.get("attention")
    parts = [f"{m} {n:,}" + (f" ({n - ref:+,}, {n / ref - 1:+.1%} vs attention)" if ref and m != "attention"
                                 else "") for m, n in sizes.items()]
    matched = result.get("settings", {}).get("base", {}).get("match_params", False)
    note = (" — size-matched (--match-params: each mixer's d_ff set to the count closest to attention's)"
            if matched else " — not size-matched (--match-params matches each mixer's count to attention's)")
    console.print("parameters by mixer: " + "; ".join(parts) + note,
        markup=False, highlight=False)


def _print_eval(result: dict) -> None:
    """The --eval-tasks columns ("task:metric"): mean per arm, and the paired p against the baseline."""
    names = [k[: -len("_mean")] for k in (result["summary"] or [{}])[0] if ":" in k and k.endswith("_mean")]
    if not names:
        return
    paired = {p["arm"]: p for p in result["paired"]}
    rows = []
    for s in result["summary"]:
        p = paired.get(s["arm"], {})
        cells = [_num(s.get(f"{n}_mean"), ".4g") + (f" (p {_num(p.get(f'{n}_p'), '.2g')})" if p else "")
                 for n in names]
        rows.append((s["arm"], *cells))
    print_fitted(console, "evaluation per arm (mean over seeds; p: paired t-test against the baseline)",
                 ("arm", *names), rows)


def _ci(p: dict) -> str:
    lo, hi = p.get("val_loss_diff_ci_low"), p.get("val_loss_diff_ci_high")
    if lo is None or hi is None or lo != lo or hi != hi:
        return "-"
    return f"[{lo:+.4f}, {hi:+.4f}]"


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _pm(row: dict, key: str) -> str:
    mean, std = row.get(f"{key}_mean"), row.get(f"{key}_std")
    if mean is None:
        return "-"
    return f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None else "")
