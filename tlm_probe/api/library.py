"""The library side of the commands: `tp.load`, `tp.probe`, `tp.plot`, `tp.diff`, `tp.schedule`, `tp.train`,
`tp.compare`.

Each takes its command's options dataclass (or its fields as keywords, which replace those of the object
given) with the command's defaults, runs the same code as the command, and returns what the command
prints with --json (or the richer object behind it) instead of printing. A user error is a UserError (the
one `error:` line the CLI prints), raised before anything heavy runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar, overload

import torch

from tlm_probe.api.handle import Handle
from tlm_probe.api_names import renamed_keywords
from tlm_probe.capture import ProbeModel, as_probe_model, load_probe_model
from tlm_probe.capture.model_source import Dtype
from tlm_probe.data.sequences import Corpus
from tlm_probe.errors import UserError
from tlm_probe.models.device import resolve_device_name
from tlm_probe.probe.options import ProbeOptions

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from tlm_probe.commands.schedule import ScheduleArch
    from tlm_probe.diff.engine import DiffResult
    from tlm_probe.diff.options import DiffOptions
    from tlm_probe.plotting.figures import PlotInput
    from tlm_probe.plotting.options import PlotOptions
    from tlm_probe.results import ProbeResult
    from tlm_probe.schedules.options import ScheduleOptions
    from tlm_probe.train.config import TrainConfigLike

ModelLike: TypeAlias = str | Path | torch.nn.Module | Handle | ProbeModel
"""A model as tp.load, tp.probe and tp.diff take it: a checkpoint folder, hub name, `.gguf` file or
`FOLDER:decoder` (str or Path), a loaded nn.Module (transformers' or ours), a Handle or a ProbeModel."""

_T = TypeVar("_T")
_PROBE = ProbeOptions()  # the defaults load() shares with `tlm probe`
PLACEMENT = ("device", "dtype", "device_map", "max_memory")
"""load()'s keywords that say where and in what precision a model is loaded: for a path only."""


def load(model: ModelLike, tokenizer: Any = None, *, device: str = _PROBE.device, dtype: Dtype = _PROBE.dtype,
         trust_remote_code: bool = False, unsafe_pickle: bool = False, device_map: str = _PROBE.device_map,
         max_memory: str = _PROBE.max_memory) -> Handle:
    """Load a model of any supported family and return a Handle (run_with_cache, hooks, stream).

    model: a checkpoint folder (ours from `tlm train`, or a Hugging Face folder), a hub name, a `.gguf`
    file, `FOLDER:decoder` (the decoder stack of an encoder-decoder), an already-loaded `nn.Module`
    (transformers' or ours), a ProbeModel or a Handle. tokenizer: for a loaded module (default: its own
    `tokenizer` attribute, if any); replaces a loaded model's tokenizer when given.
    device, dtype, device_map, max_memory, trust_remote_code, unsafe_pickle: as `tlm probe`'s options of
    the same names (same defaults; refused beside a module already loaded, which stays where it is). Pickle
    weights are refused unless unsafe_pickle=True. An unsupported family is one UserError line naming the
    closest supported type."""
    placed = ProbeOptions(device=device, dtype=dtype, device_map=device_map, max_memory=max_memory)  # checked
    if not isinstance(model, str | Path):
        given = [f"{k}=" for k in PLACEMENT if getattr(placed, k) != getattr(_PROBE, k)]
        if given:  # not ignored in silence: the caller asked for a move that would not happen
            raise UserError(f"a model already loaded stays where it is: drop {', '.join(given)} (move it "
                            "with .to(...) first), or give its folder or hub name")
    if isinstance(model, Handle):
        return model if tokenizer is None else Handle(as_probe_model(model.probe_model, tokenizer))
    if not isinstance(model, str | Path):
        return Handle(as_probe_model(model, tokenizer))
    pm = load_probe_model(model, resolve_device_name(device), dtype, trust_remote_code=trust_remote_code,
                          unsafe_pickle=unsafe_pickle, device_map=device_map, max_memory=max_memory)
    return Handle(pm if tokenizer is None else as_probe_model(pm, tokenizer))


def _model_arg(model, tokenizer) -> str | Path | ProbeModel:
    """What the engines take: a path or hub name as is, anything loaded as a ProbeModel."""
    if isinstance(model, Handle):
        model = model.probe_model
    if isinstance(model, str | Path) and tokenizer is None:
        return model
    if isinstance(model, str | Path):
        return load(model, tokenizer).probe_model
    return as_probe_model(model, tokenizer)


@overload  # type checkers: the table, or with full=True the ProbeResult
def probe(model: ModelLike, data: Corpus | None = None, options: ProbeOptions | None = None, *,
          tokenizer: Any = None, progress: bool = False, trust_remote_code: bool = False,
          unsafe_pickle: bool = False, full: Literal[False] = False, threads: int = 0,
          **fields: Any) -> pd.DataFrame: ...
@overload
def probe(model: ModelLike, data: Corpus | None = None, options: ProbeOptions | None = None, *,
          tokenizer: Any = None, progress: bool = False, trust_remote_code: bool = False,
          unsafe_pickle: bool = False, full: Literal[True], threads: int = 0,
          **fields: Any) -> ProbeResult: ...
@renamed_keywords(allow_pickle="unsafe_pickle")
def probe(model: ModelLike, data: Corpus | None = None, options: ProbeOptions | None = None, *,
          tokenizer: Any = None, progress: bool = False, trust_remote_code: bool = False,
          unsafe_pickle: bool = False, full: bool = False, threads: int = 0,
          **fields: Any) -> pd.DataFrame | ProbeResult:
    """Probe a model: per-layer statistics streamed over a corpus, as `tlm probe` computes them.

    model: anything `tp.load` takes (folder, hub name, .gguf, our run, loaded nn.Module, Handle,
    ProbeModel). data: the corpus (`--data`; default builtin:pydoc). options: a ProbeOptions; keywords of
    its fields (stats=, max_tokens=, seq_len=, batch_size=, exclude_bos=, backend=, device=, dtype=,
    split=, importance={...}, ...) replace those of `options`. tokenizer: for a loaded module without one.
    unsafe_pickle: --unsafe-pickle (allow_pickle= is its deprecated name). threads: torch's CPU threads for
    this call (0 leaves them). Returns the tidy result table (model, layer, depth, statistic, value,
    ci_low, ci_high, n_tokens, d_ff) with its provenance in df.attrs["provenance"]; with full=True the
    ProbeResult (table, matrices, provenance, agreement: the spearman_* rows, one per model and proxy,
    which are not rows of the per-layer table): the matrices and agreement are not put in attrs, because
    pandas compares attrs when concatenating tables of several models.
    `tlm_probe.results.write_probe(folder, result)` writes as `tlm probe --out` does."""
    from tlm_probe.probe.engine import run_probe
    from tlm_probe.threads import torch_threads

    if data is not None:
        fields["data"] = data
    if "importance" in fields:
        fields["importance"] = dict(fields["importance"] or {})
    opts = _replaced(options, ProbeOptions, fields)
    with torch_threads(threads, "threads"):
        res = run_probe(_model_arg(model, tokenizer), opts, progress=progress,
                        trust_remote_code=trust_remote_code, unsafe_pickle=unsafe_pickle)
    res.table.attrs["provenance"] = res.provenance
    return res if full else res.table


def plot(inputs: PlotInput | Sequence[PlotInput], options: PlotOptions | dict[str, Any] | None = None, *,
         out: str | Path | None = None, **fields: Any) -> Figure:
    """Draw one figure from result folders or tables, as `tlm plot` does; returns the matplotlib Figure.

    inputs: probe result folders/files (kinds depth, heatmap, importance), comparison or run folders
    (curves), a comparison folder (sweep, paired, advantage), ...: what `tlm plot` takes; the probe
    figures also take tp.probe's tables (and ProbeResults, for the heatmap) in memory, checked as their
    files would be.
    options: a PlotOptions (kind=, statistic=, size=, dpi=, ...), or its fields as keywords. out: also
    save it there (.png, .pdf or .svg; written to a temporary file, then renamed). What the figure leaves
    out, and why, is in fig.tlm_notes (the CLI prints these as notes)."""
    import pandas as pd

    from tlm_probe.plotting.figures import build_figure
    from tlm_probe.plotting.options import PlotOptions
    from tlm_probe.plotting.style import figure_format, save_figure
    from tlm_probe.results import ProbeResult

    opts = _replaced(options, PlotOptions, fields)
    if out is not None:
        figure_format(Path(out))  # a bad suffix fails before any reading
    notes: list[str] = []
    one = isinstance(inputs, str | Path | pd.DataFrame | ProbeResult)  # a table iterates over its columns
    fig = build_figure([inputs] if one else list(inputs), opts, notes=notes)
    fig.tlm_notes = notes
    if out is not None:
        save_figure(fig, out)
    return fig


def diff(model_a: ModelLike, model_b: ModelLike, options: DiffOptions | dict[str, Any] | None = None, *,
         out: str | Path | None = None, overwrite: bool = False, trust_remote_code: bool = False,
         unsafe_pickle: bool = False, **fields: Any) -> DiffResult:
    """Compare two models on the same tokens, as `tlm diff A B` does; returns the DiffResult
    (.summary: what diff.json holds and --json prints; .cka: the layer x layer CKA matrix; .drift).

    model_a, model_b: anything `tp.load` takes (ΔNLL and KL are A against B). options: a DiffOptions
    (data=, max_tokens=, seq_len=, stats=, device=, ...), or its fields as keywords. out: also write the
    folder the command writes (diff.json, cka.csv, layers.csv, tokens.csv, stats.csv), under the same
    rules: never replacing files it did not write, overwrite=True to replace its own."""
    from tlm_probe.commands.diff import DIFF_FILES
    from tlm_probe.diff.engine import run_diff, write_diff
    from tlm_probe.diff.options import DiffOptions, check_models
    from tlm_probe.files.folder_lock import folder_lock
    from tlm_probe.files.out_folder import claim

    opts = _replaced(options, DiffOptions, fields)
    if isinstance(model_a, str | Path) and isinstance(model_b, str | Path):
        check_models(str(model_a), str(model_b))  # the command's checks before loading
    a, b = _model_arg(model_a, None), _model_arg(model_b, None)
    if isinstance(a, ProbeModel) and isinstance(b, ProbeModel) and a.model is b.model:
        raise UserError("model_a and model_b are the same loaded model: its diff with itself is zero "
                        "everywhere; give two models")
    if out is not None:
        claim(Path(out), overwrite=overwrite, writes=DIFF_FILES, own_needs_overwrite=False, kind="diff")
    with folder_lock(Path(out)) if out is not None else contextlib.nullcontext():
        res = run_diff(a, b, opts, trust_remote_code=trust_remote_code, unsafe_pickle=unsafe_pickle)
        if out is not None:
            write_diff(Path(out), res)
    return res


def schedule(schedule: str | Path | Sequence[int] | None = None,
             options: ScheduleOptions | dict[str, Any] | None = None, *,
             arch: ScheduleArch | dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """Per-layer widths of a schedule with its parameter, FLOP and KV-cache parity against uniform, as
    `tlm schedule --json` prints them.

    schedule: the --schedule text (cosine, linear:1.5:0.5, wider-early, '4096,2048,...', x.json, ...).
    options: a ScheduleOptions (start=, end=, steepness=, wide_factor=, multiple_of=, component=), arch: a
    ScheduleArch (n_layers=, d_ff=, d_model=, vocab_size=, mlp=, seq_len=, preset=, mixer=, heads...);
    keywords of either's fields replace theirs. Returns the dict (widths, params, flops, parity, ...).
    Deriving a schedule from a probe (--from-probe) is the command's: `tlm schedule --from-probe`."""
    from tlm_probe.commands.schedule import ScheduleArch, _spec, schedule_result
    from tlm_probe.schedules.options import ScheduleOptions

    if schedule is not None:
        fields["schedule"] = schedule
    given = {**_as_fields(options), **_as_fields(arch), **fields}  # either given as a dict: its fields
    ours, theirs = _split(given, ScheduleOptions, ScheduleArch)
    opts = _replaced(None if isinstance(options, dict) else options, ScheduleOptions, ours)
    shape = _replaced(None if isinstance(arch, dict) else arch, ScheduleArch, theirs)
    return schedule_result(_spec(opts), shape, opts.component)[0]


def _split(fields: dict[str, Any], *classes: type) -> list[dict[str, Any]]:
    """fields -> one dict per dataclass, by field name; a name none has is a UserError (with the closest
    name, where one is close)."""
    import difflib

    names = [{f.name for f in dataclasses.fields(c)} for c in classes]
    known = set().union(*names)
    unknown = sorted(set(fields) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"unknown option(s): {', '.join(unknown)}{hint}")
    return [{k: v for k, v in fields.items() if k in n} for n in names]


def _as_fields(options: object) -> dict[str, Any]:
    """An options object given as a dict: its items, checked by _split like keywords; else nothing."""
    return dict(options) if isinstance(options, dict) else {}


COMMA_LISTS = ("stats",)
"""Text fields that hold a comma-separated list (--stats a,b): a list or tuple of words is taken too."""


def _replaced(options: _T | dict[str, Any] | None, cls: type[_T], fields: dict[str, Any]) -> _T:
    """`options` (an instance of cls, a dict of its fields, or None for the defaults) with `fields`
    replacing its own; an unknown name is one UserError, as on the command line."""
    if not (options is None or isinstance(options, dict | cls)):
        raise UserError(f"options is a {cls.__name__} or a dict of its fields, not {type(options).__name__}")
    (ours,) = _split({**_as_fields(options), **fields}, cls)
    for name in COMMA_LISTS:
        words = ours.get(name)
        if isinstance(words, list | tuple) and all(isinstance(w, str) for w in words):
            ours[name] = _listed(words)
    return dataclasses.replace(cls() if options is None or isinstance(options, dict) else options, **ours)


def train(config: TrainConfigLike = None, out: str | Path | None = None, *, resume: bool = False,
          overwrite: bool = False, stop_at: int | None = None, **fields: Any) -> dict[str, Any]:
    """Train one tapered (or uniform) model and write its checkpoint folder, as `tlm train` does; returns
    the run summary (what `tlm train --json` prints: step, val_loss, val_ppl, params, out, ...).

    config: a TrainConfig, a config file (YAML/JSON, as `tlm train --config`), a dict of what such a file
    holds, or None; keywords of TrainConfig's fields (schedule=, steps=, tokens=, preset=, d_model=,
    data=, seed=, ...) replace its values (schedule= may be a list of widths). As on the command line, a
    run given neither steps nor tokens trains 300 steps. out: the run folder (required); resume=True
    continues it from its checkpoint; stop_at: checkpoint and stop after this step. Never replaces a
    folder it did not write (overwrite=True replaces its own)."""
    from tlm_probe.schedules.options import schedule_text
    from tlm_probe.train.training import run_training

    folder = _out_folder(out, "train", "the run folder")
    if "schedule" in fields:  # a list of widths, as tp.schedule takes
        fields["schedule"] = schedule_text(fields["schedule"])
    tc = _train_config(config, fields)
    return run_training(tc, folder, resume=resume, overwrite=overwrite, stop_at=stop_at)


def compare(schedules: str | list[str] | None = None, seeds: str | list[int] = "0,1,2",
            config: TrainConfigLike = None,
            out: str | Path | None = None, *, shapes: str | list[str] | None = None,
            ratios: str = "1.25:0.75,1.5:0.5,1.75:0.25", mixers: str | list[str] | None = None,
            overwrite: bool = False, eval_tasks: str | list[str] = "", eval_limit: int | None = None,
            **fields: Any) -> dict[str, Any]:
    """Train each schedule with each seed on the same tokens and budget and test each arm against uniform
    with paired seeds, as `tlm compare` does (`shapes=`: a grid of shapes x ratios, as `tlm sweep`);
    returns what `tlm compare --json` prints (settings, budget, results, summary, paired, and the figures'
    paths). The tables are in `out` (results.csv, summary.csv, paired.csv; pandas reads them).

    schedules: schedule specs, a list or comma-separated (default: the paper's six arms; with shapes=:
    uniform); seeds: a list of ints or "0,1,2"; config and keywords: the training options, as tp.train takes
    them; eval_tasks (eval_limit documents each): `tlm eval` tasks scored after each run, as task:metric
    columns of the tables. Re-running the same call continues an interrupted comparison."""
    from tlm_probe.commands.compare import comparison_arms, eval_hook_for
    from tlm_probe.train.arms import parse_seeds
    from tlm_probe.train.compare import compare_arms
    from tlm_probe.workflows.compare_figures import write_figures

    folder = _out_folder(out, "compare", "the comparison folder")
    base = _train_config(config, fields)
    arms = comparison_arms(base, _listed(schedules), _listed(shapes), ratios, _listed(mixers))
    seed_list = parse_seeds(str(_listed(seeds)))
    after_run = eval_hook_for(_listed(eval_tasks) or "", eval_limit)
    result = compare_arms(base, arms, seed_list, folder, overwrite=overwrite, after_run=after_run)
    result.pop("rank", None)
    return result | write_figures(folder, sweep=bool(shapes))


def _listed(value: str | list[str] | list[int] | tuple[str, ...] | None) -> str | None:
    """A list as the command line's comma-separated text; text or None as is."""
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else value


def _out_folder(out: str | Path | None, call: str, what: str) -> Path:
    """`out` as a Path; None (not given) or another type is a UserError naming the call."""
    if out is None:
        raise UserError(f"{call}() needs out=, {what} to write")
    if not isinstance(out, str | Path):
        raise UserError(f"out= is {what} to write (a path), not {type(out).__name__}")
    return Path(out)


def _train_config(config, fields: dict):
    """The TrainConfig of tp.train's and tp.compare's `config` (a TrainConfig, a config file or its content
    as a dict, or None) with `fields` replacing its values."""
    from tlm_probe.commands.train import build_config
    from tlm_probe.train.config import TrainConfig
    from tlm_probe.train.config_sections import flat_options

    if isinstance(config, TrainConfig):
        return dataclasses.replace(config, **fields)
    if isinstance(config, dict):  # a config file's content: flat keys or its sections
        return build_config(None, {**flat_options(config), **fields})
    if config is None or isinstance(config, str | Path):
        return build_config(Path(config) if config is not None else None, fields)
    raise UserError(f"config is a TrainConfig, a dict of its fields or a config file, not "
                    f"{type(config).__name__}")
