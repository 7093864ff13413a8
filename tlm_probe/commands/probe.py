"""`tlm probe MODEL --data DATA --out DIR`: per-layer alignment statistics of any supported model.

Under torchrun (WORLD_SIZE > 1) every rank probes its shard; rank 0 prints and writes the result.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import typer

from tlm_probe.commands.common import (
    command,
    console,
    err_console,
    interrupt_code,
    print_json,
    say,
)
from tlm_probe.commands.flags import JsonOut, Loading, Threads
from tlm_probe.commands.options import with_options
from tlm_probe.commands.overwrite import overwrite_help
from tlm_probe.commands.tables import print_fitted
from tlm_probe.errors import UserError
from tlm_probe.probe.options import ProbeOptions
from tlm_probe.progress import importing_libraries
from tlm_probe.threads import torch_threads

SUMMARY_STATS = (
    "align_mlp_mid",
    "align_mlp_pre",
    "align_attn_pre",
    "norm_ratio_mlp",
    "block_influence",
    "resid_norm_growth",
    "attn_entropy",
)
# shown when no alignment statistic was asked for (--stats importance)
IMPORTANCE_SUMMARY = (
    "ablation_dnll_mlp_zero",
    "ablation_shift_mlp_zero",
    "ablation_dnll_block_skip",
    "logit_lens_kl",
    "taylor_mlp",
    "dead_neuron_frac",
    "probe_acc",
)


@dataclass(frozen=True, kw_only=True)
class ProbeRun(Loading, Threads, JsonOut):
    """`tlm probe`'s settings beside ProbeOptions: where it writes and how the model is served."""

    out: Path
    """Result folder: results.csv/.parquet, provenance.json."""
    overwrite: bool = field(default=False, metadata={"help": overwrite_help("probe")})
    """See overwrite.py."""
    adapter: Path | None = None
    """JSON adapter row (layers, mlp, mlp_down, final_norm, lm_head, block_kind, taps) that serves or
    overrides its model_types; proved by the guardrails before any statistic."""
    discover: bool = False
    """For a model type with no adapter row: infer one from the module tree and prove it by invariants on
    the loaded model before any statistic (refused, naming the failed invariant)."""
    importance_option: tuple[str, ...] = ()
    """Importance setting KEY=VALUE, repeatable (e.g. freq_threshold=0.001, sample_size=4096)."""
    checkpoints: str | None = None
    """MODEL is a `tlm train` run: probe its kept checkpoints (state/step_*) instead, 'all' or steps
    '100,200'; one table with a step column (tlm plot --kind trajectory draws it)."""


def register(app: typer.Typer) -> None:
    @command(
        app,
        "probe",
        "tlm probe runs/demo/cosine --data builtin:pydoc --out results/cosine --max-tokens 20000",
    )
    @with_options(options=ProbeOptions, run=ProbeRun)
    def probe(
        model: str = typer.Argument(..., help="Checkpoint folder (ours or Hugging Face) or a hub name."),
        *,
        options: ProbeOptions,
        run: ProbeRun,
    ):
        """Measure how each layer's MLP and attention outputs align with the residual stream."""
        from tlm_probe.capture.adapters import enable_discovery, load_adapter_file, register_adapter
        from tlm_probe.capture.model_source import check_model_source

        enable_discovery(run.discover)
        if run.adapter is not None:
            register_adapter(load_adapter_file(run.adapter))
        # a missing path, an offline hub name, an unsupported architecture, a partial --device-map: first
        check_model_source(model, device_map=options.device_map)
        check_not_weights(options.data)
        _check_out(run.out, run.overwrite, options.max_tokens, options.exclude_bos,
                   inputs=(model, options.data))
        _probe(model, options, run)


def _probe(model: str, options: ProbeOptions, run: ProbeRun) -> None:
    """`tlm probe` after its checks: import, probe (one model or its checkpoints), write, report."""
    out = run.out
    main = int(os.environ.get("RANK", "0")) == 0  # torchrun: rank 0 speaks and writes
    with importing_libraries(enabled=main):  # seconds of imports: the first line within a second says so
        from tlm_probe.files.folder_lock import folder_lock
        from tlm_probe.importance.options import parse_pairs
        from tlm_probe.probe.engine import run_probe
        from tlm_probe.results import write_probe

        import_loaders(model)  # the libraries first: a quick load stays quiet (progress.Phase)
    # the device is resolved once, by run_probe (for the library's callers too)
    opts = replace(options, importance=parse_pairs(list(run.importance_option)))
    steps = _steps(model, run.checkpoints)
    lock = folder_lock(out) if main else contextlib.nullcontext()
    with lock, torch_threads(run.threads), _interrupt(out):
        kw = dict(progress=not run.json_out, trust_remote_code=run.trust_remote_code,
                  unsafe_pickle=run.unsafe_pickle)
        if steps:
            from tlm_probe.probe.checkpoints import probe_checkpoints

            res = probe_checkpoints(model, steps, opts, run_probe, **kw)
        else:
            res = run_probe(model, opts, **kw)
        if not main:
            return
        if not len(res.table) or ("n_tokens" in res.table and not res.table["n_tokens"].gt(0).any()):
            raise UserError("no tokens were measured (too few tokens for --max-tokens/--seq-len with "
                            "--exclude-bos?); nothing written")
        write_probe(out, res)
    if run.json_out:
        agreement = [] if res.agreement is None else res.agreement.to_dict("records")
        print_json({"out": str(out), "provenance": res.provenance,
                    "results": res.table.to_dict("records"), "agreement": agreement})
    else:
        _print_summary(res.table, res.provenance, out, res.agreement, res.matrices)


def _steps(model: str, checkpoints: str | None):
    """The (step, folder) list of --checkpoints, checked before any probing (None without the flag)."""
    if checkpoints is None:
        return None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError("--checkpoints runs in one process; drop torchrun")
    from tlm_probe.probe.checkpoints import select_steps

    return select_steps(model, checkpoints)


_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pth", ".ckpt", ".onnx")


def import_loaders(model: str) -> None:
    """Import what loading `model` imports (transformers' model classes; for a tlm checkpoint ours and
    TransformerLens) before the load is timed: on a busy machine the imports alone take seconds that are
    no part of loading this model, and a quick load stays quiet (progress.Phase)."""
    import transformers.modeling_utils  # noqa: F401

    import tlm_probe.capture.loading  # noqa: F401
    from tlm_probe.models.config_file import read_config_json

    folder = Path(model)
    with contextlib.suppress(UserError, OSError, ValueError):  # a bad folder: the loader says what is wrong
        if (folder / "config.json").is_file() and read_config_json(folder).get("model_type") == "tlm":
            import tlm_probe.models.io  # noqa: F401


def check_not_weights(data: str) -> None:
    """A weights file (or a model folder) given as --data would be read as text or token ids: refuse."""
    path = Path(data)
    if path.is_file() and path.suffix.lower() in _WEIGHT_SUFFIXES:
        raise UserError(f"--data {data} is a model weights file, not text or token ids; "
                        "give the model as the first argument and the data with --data")
    if path.is_dir() and (path / "config.json").is_file() and any(path.glob("*.safetensors")):
        raise UserError(f"--data {data} is a model folder (config.json and weights), not text or token ids")


def _check_out(out: Path, overwrite: bool, max_tokens: int, exclude_bos: bool, inputs=()) -> None:
    """Before loading anything: --out can be written, is apart from the model and data it reads, and
    holds no file of the user's (or of another command) we would replace."""
    from tlm_probe.files.fileio import read_manifest
    from tlm_probe.files.out_folder import check_apart, claim
    from tlm_probe.result_files import PROBE_FILES

    if exclude_bos and max_tokens == 1:
        raise UserError("--max-tokens 1 with --exclude-bos leaves no token to measure")
    check_apart(out, inputs)
    claim(out, overwrite=overwrite, writes=PROBE_FILES, own_needs_overwrite=False, kind="probe")
    earlier = sorted(e for e in read_manifest(out) if e in PROBE_FILES) if out.is_dir() else []
    if earlier and int(os.environ.get("RANK", "0")) == 0:  # replaced without --overwrite: say so, once
        say(f"note: {out} holds the results of an earlier probe{_earlier(out)}; this probe replaces them "
            f"({', '.join(earlier)})")


def _earlier(out: Path) -> str:
    """' of MODEL (N tokens)' from an earlier probe's provenance.json, '' where it cannot be read."""
    from tlm_probe.files.jsonfile import read_json_object
    from tlm_probe.result_files import PROVENANCE

    with contextlib.suppress(UserError, OSError, ValueError, TypeError, KeyError):
        prov = read_json_object(out / PROVENANCE)
        return f" of {prov['model']} ({int(prov['data']['n_tokens']):,} tokens)"
    return ""


@contextlib.contextmanager
def _interrupt(out: Path):
    """Ctrl-C: one line saying that nothing was written, exit code 130."""
    try:
        yield
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM
        err_console.print(f"interrupted; nothing written to {out}", markup=False, highlight=False)
        raise typer.Exit(interrupt_code(e)) from None


def _print_summary(table, prov: dict, out: Path, agreement=None, matrices=None) -> None:
    if "step" in table and table["step"].nunique() > 1:  # checkpoints: the summary of the last one
        steps = sorted(table["step"].unique())
        console.print(f"probed {len(steps)} checkpoints, steps {', '.join(map(str, steps))}; "
                      f"the table shows step {steps[-1]}", markup=False, highlight=False)
        table = table[table["step"] == steps[-1]]
        agreement = None if agreement is None else agreement[agreement["step"] == steps[-1]]
    wide = table.pivot_table(index=["layer", "d_ff"], columns="statistic", values="value").reset_index()
    cols = (
        [c for c in SUMMARY_STATS if c in wide.columns]
        or [c for c in IMPORTANCE_SUMMARY if c in wide.columns]
        or [c for c in wide.columns if c not in ("layer", "d_ff")]
    )
    title = (f"{prov['model']} ({prov['architecture']['family']}, {prov['architecture']['block_kind']}, "
             f"{prov['data']['n_tokens']:,} tokens, backend {prov['backend']})")
    rows = [(str(int(row["layer"])), str(int(row["d_ff"])), *(_cell(row, c) for c in cols))
            for _, row in wide.iterrows()]
    print_fitted(console, title, ("layer", "d_ff", *cols), rows, keys=2)  # split, never cut, at any width
    _print_rest(table, cols, matrices, out)
    if agreement is not None and not agreement.empty:
        _print_agreement(agreement)
    if prov.get("no_mlp_layers"):
        console.print(f"blocks with no MLP (d_l = 0): {', '.join(map(str, prov['no_mlp_layers']))}; "
                      "no MLP rows for them, block-level rows kept", markup=False, highlight=False,
                      soft_wrap=True)
    lens = prov.get("importance", {}).get("logit_lens")
    if lens:
        console.print(lens_cost_line(lens), markup=False, highlight=False, soft_wrap=True)
    more = ", matrices.csv, matrices.parquet" if matrices is not None and len(matrices) else ""
    more += ", agreement.csv, agreement.parquet" if agreement is not None and not agreement.empty else ""
    console.print(f"wrote {out}/results.csv, results.parquet{more}, provenance.json", soft_wrap=True)


def _print_rest(table, shown, matrices, out: Path) -> None:
    """What the files hold beyond the table just printed: the other statistics of results.csv, and the
    layer×layer matrices, each with the command that draws it."""
    rest = [s for s in dict.fromkeys(table["statistic"].astype(str)) if s not in shown]
    if rest:
        console.print(f"also in results.csv ({len(rest)} more statistics, not shown above): "
                      f"{', '.join(rest)}; draw any with `tlm plot {out} -s NAME`", markup=False,
                      highlight=False, soft_wrap=True)
    if matrices is not None and len(matrices):
        names = ", ".join(dict.fromkeys(matrices["statistic"].astype(str)))
        console.print(f"in matrices.csv (layer × layer): {names}; draw with `tlm plot {out} --kind heatmap`",
                      markup=False, highlight=False, soft_wrap=True)


def _print_agreement(rows) -> None:
    """The agreement rows (agreement.csv: one value per model and proxy) with their CI."""
    from tlm_probe.importance.agreement import MIN_CI_LAYERS

    cells = [(str(r["statistic"]), f"{r['value']:+.4f}", _agreement_ci(r, MIN_CI_LAYERS))
             for _, r in rows.iterrows()]
    title = f"Spearman agreement across layers with {rows['target'].iloc[0]} (agreement.csv)"
    print_fitted(console, title, ("statistic", "value", "95% CI"), cells, left=("statistic",))
    if (rows["ci_low"].isna() & (rows["n_layers"] < MIN_CI_LAYERS)).any():
        console.print(f"no CI over fewer than {MIN_CI_LAYERS} layers: over n layers even a perfect ranking "
                      "happens by chance with probability 2/n!", markup=False, highlight=False,
                      soft_wrap=True)


def _agreement_ci(r, min_layers: int) -> str:
    if r["ci_low"] == r["ci_low"]:
        return f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
    if r["n_layers"] < min_layers:
        return f"none: {int(r['n_layers'])} layers"
    return "none: rho = ±1" if abs(r["value"]) == 1 else "-"


def lens_cost_line(lens: dict) -> str:
    """The logit lens's own cost, from provenance["importance"]["logit_lens"] (importance/logit_lens.py)."""
    return (
        f"logit lens: {lens['seconds']:.2f} s ({100 * lens['time_share']:.0f}% of the importance pass), "
        f"{lens['peak_bytes'] / 2**20:.1f} MiB ({100 * lens['memory_share']:.0f}% of first-pass memory); "
        f"positions decoded: {lens['positions']}"
        + ("" if lens["positions"] != "all" else " (importance option lens_positions=K samples K)")
    )


def _cell(row, col: str) -> str:
    if row["d_ff"] == 0 and row[col] != row[col]:  # NaN: the statistic of an MLP the block does not have
        return "no MLP"
    return f"{row[col]:+.4f}"


