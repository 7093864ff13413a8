"""`tlm diff A B --out DIR`: where two models differ (layer correspondence by CKA, residual drift, KL and
ΔNLL by position and token frequency, and with --stats the difference of probe statistics), streamed over a
corpus (tlm_probe/diff/engine.py). Under torchrun every rank diffs its share of the sequences, the sums are
all-reduced, and rank 0 alone claims the folder, writes and prints."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import typer

from tlm_probe.commands.common import command, console, print_json
from tlm_probe.commands.flags import JsonOut, Loading, Threads
from tlm_probe.commands.options import with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.diff.options import DiffOptions
from tlm_probe.errors import UserError
from tlm_probe.progress import importing_libraries

MODEL_HELP = "Checkpoint folder (ours or Hugging Face) or a hub name."


@dataclass(frozen=True, kw_only=True)
class DiffRun(Loading, Threads, JsonOut):
    """`tlm diff`'s settings beside DiffOptions."""

    out: Path
    """Result folder: diff.json, cka.csv, layers.csv, tokens.csv (and stats.csv with --stats)."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("diff")})
    """See commands/overwrite.py."""
    arm: str = ""
    """With a comparison folder as MODEL_A (and no MODEL_B): diff this arm's run of every seed against the
    baseline's run of the same seed; each number is a mean over the seeds with a 95% t interval."""
    baseline: str = "uniform"
    """The reference arm of --arm (model B of each seed pair)."""


def register(app: typer.Typer) -> None:
    @command(app, "diff", "tlm diff cmp/runs/cosine:1.5:0.5-s0 cmp/runs/uniform-s0 --out diff/c-vs-u\n"
                          "  tlm diff cmp --arm cosine:1.5:0.5 --baseline uniform --out diff/c-vs-u-seeds")
    @with_options(options=DiffOptions, run=DiffRun)
    def diff(
        model_a: str = typer.Argument(..., help=f"Model A. {MODEL_HELP}"),
        model_b: str = typer.Argument("", help=f"Model B, the reference of drift, KL(A||B) and "
                                               f"ΔNLL = A - B. {MODEL_HELP} Omitted with --arm.",
                                      show_default=False),
        *,
        options: DiffOptions,
        run: DiffRun,
    ):
        """Compare two models on the same tokens, layer by layer and prediction by prediction.

        CKA between every pair of layers, residual drift per layer, and KL / ΔNLL of their next-token
        predictions by position and by token frequency."""
        from tlm_probe.diff.options import check_models
        from tlm_probe.files.out_folder import check_apart, claim

        pairs = _pairs(model_a, model_b, run)
        for _, a, b in pairs:  # before anything is read or loaded: paths, vocabularies (config.json)
            check_models(str(a), str(b))
        with importing_libraries():  # torch: after the checks; the first line within a second says so
            from tlm_probe.diff.engine import run_diff, write_diff
            from tlm_probe.diff.pairs import aggregate
            from tlm_probe.files.folder_lock import folder_lock
            from tlm_probe.ranks import process_group, rank
            from tlm_probe.threads import torch_threads

        check_apart(run.out, [model_a, *([model_b] if model_b else []), options.data])
        main = rank() == 0
        if main:
            claim(run.out, overwrite=run.overwrite, writes=DIFF_FILES, own_needs_overwrite=False, kind="diff")
        with folder_lock(run.out) if main else contextlib.nullcontext(), \
                torch_threads(run.threads, "--threads"), process_group():
            load = dict(trust_remote_code=run.trust_remote_code, unsafe_pickle=run.unsafe_pickle)
            results = [run_diff(str(a), str(b), options, **load) for _, a, b in pairs]
            if not main:
                return
            res = results[0] if not run.arm else aggregate(results, [s for s, _, _ in pairs], run.arm,
                                                           run.baseline)
            write_diff(run.out, res)
        _report(res.summary, run)


def _report(s: dict, run: DiffRun) -> None:
    """The diff's summary: JSON, or a line per layer (and per seed pair with --arm)."""
    if run.arm:
        _print_seeds(s)
    if run.json_out:
        print_json({"out": str(run.out), **s})
        return
    console.print(f"{s['model_a']} vs {s['model_b']}: {s['n_tokens']:,} tokens; KL(A||B) "
                  f"{s['kl_mean']:.4g} nats/token, ΔNLL (A - B) {s['dnll_mean']:+.4f}",
                  highlight=False, markup=False)
    for l, (row, best) in enumerate(zip(s["cka"], s["best_match"], strict=True)):
        console.print(_layer_line(l, row, best, s["drift"][l]), highlight=False, markup=False)
    _print_stats(s)
    extra = ", stats.csv" if s.get("stats") else ""
    console.print(f"wrote {run.out}/diff.json, cka.csv, layers.csv, tokens.csv{extra}", highlight=False)


DIFF_FILES = ("diff.json", "cka.csv", "layers.csv", "tokens.csv", "stats.csv")


def _pairs(model_a: str, model_b: str, run: DiffRun) -> list[tuple]:
    """(seed, A, B) of what to diff: the two models given, or every seed pair of --arm in a comparison."""
    if not run.arm:
        if not model_b:
            raise UserError("give two models (MODEL_A MODEL_B), or a comparison folder with --arm ARM")
        return [(None, model_a, model_b)]
    if model_b:
        raise UserError("with --arm, MODEL_A is a comparison folder and MODEL_B is not given (the baseline "
                        "is --baseline)")
    from tlm_probe.diff.pairs import seed_pairs

    return seed_pairs(Path(model_a), run.arm, run.baseline)


def _layer_line(l: int, row: list, best, drift) -> str:
    """One layer of the summary; a value the diff could not compute (None in diff.json) reads n/a."""
    def num(x) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    finite = [x for x in row if x is not None]
    return (f"  layer {l}: CKA with B's layer {l} {num(row[l] if l < len(row) else None)}, best match "
            f"B{best if best is not None else '?'} ({num(max(finite) if finite else None)}); "
            f"drift {num(drift)}")


def _print_seeds(s: dict) -> None:
    def ci(m: dict) -> str:
        if m["ci_low"] is None:
            return f"{m['mean']:+.4f} (one seed: no interval)"
        return f"{m['mean']:+.4f} [{m['ci_low']:+.4f}, {m['ci_high']:+.4f}]"

    console.print(f"{s['model_a']} vs {s['model_b']} over seeds {', '.join(map(str, s['seeds']))}: KL(A||B) "
                  f"{ci(s['kl'])}, ΔNLL (A - B) {ci(s['dnll'])} nats/token (means, 95% t intervals)",
                  highlight=False, markup=False)


def _print_stats(s: dict) -> None:
    """One line per asked statistic: its difference A - B at each layer of A, with the CI."""
    def one(r: dict) -> str:
        if r["diff"] is None:
            return f"{r['layer']}: n/a"
        ci = "" if r["ci_low"] is None else f" [{r['ci_low']:+.3g}, {r['ci_high']:+.3g}]"
        return f"{r['layer']}: {r['diff']:+.3g}{ci}"

    for stat in dict.fromkeys(r["statistic"] for r in s.get("stats") or []):
        rows = [r for r in s["stats"] if r["statistic"] == stat]
        console.print(f"  {stat} A - B by layer (95% CI): " + "; ".join(map(one, rows)), highlight=False,
                      markup=False)
