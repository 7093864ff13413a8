"""`tlm eval` as a library call: check the options, load the model once, run the harness tasks and the
perplexity sources, and return the tidy table (model, task, metric, value, stderr, n) with provenance.

Task names: `pydoc-mc` / `pydoc-lastword` (built here from the held-out split, see builtin_tasks), a path
to a task YAML or a folder of them (offline), or any lm-evaluation-harness task name (its dataset must be
reachable: in the cache, or online).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import warnings
from dataclasses import InitVar, asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tlm_probe.api_names import renamed_keywords
from tlm_probe.capture.dispatch import check_dispatch_options
from tlm_probe.capture.option_fields import Dtype, Sample, Split, shared
from tlm_probe.data.sources import resolve_split
from tlm_probe.errors import UserError
from tlm_probe.eval.builtin_tasks import TASKS, write_task
from tlm_probe.eval.offline import is_local, offline
from tlm_probe.eval.task_code import check_task_code
from tlm_probe.eval.task_names import check_task_names
from tlm_probe.ranges import check_values
from tlm_probe.seeds import check_seed

if TYPE_CHECKING:
    import pandas

EVAL_COLUMNS = ["model", "task", "metric", "value", "stderr", "n"]
TASKS_HELP = ("Comma-separated (or repeat --tasks): pydoc-mc, pydoc-lastword (built in, offline), a task "
              "YAML, or any lm-evaluation-harness task name (its dataset must be available).")
OLD_NAMES = {"ppl_split": "split", "ppl_tokens": "max_tokens"}
"""EvalOptions' old keyword -> its name now (the CLI's); the old one still works (DeprecationWarning)."""


@dataclass(frozen=True, kw_only=True)
class EvalOptions:
    """Everything that shapes an eval run besides the model. `tlm eval`'s options are generated from these
    fields (commands/options.py): one default and one help for the library and the CLI. The library also
    takes tasks as one comma-separated string, limit=None for all documents, and the old keywords
    ppl_split= and ppl_tokens= (DeprecationWarning)."""

    tasks: tuple[str, ...] = field(default=(), metadata={"help": TASKS_HELP})
    """Harness task names, built-in task names or task YAML files/folders; a list, a tuple or one
    comma-separated string (each entry may itself hold several names, comma separated)."""
    ppl_data: tuple[str, ...] = ()
    """Perplexity on this source (repeatable; any source `tlm train` reads)."""
    split: Split = shared("split", before="Split of each --ppl-data source (auto: resolved per source). ")
    ppl_context: int = 0
    """Perplexity window length (0: the model's context)."""
    ppl_stride: int = 0
    """Stride between perplexity windows (0: = context, disjoint)."""
    max_tokens: int = 65_536
    """Scored tokens per --ppl-data source (0: all)."""
    sample: Sample = shared("sample")
    limit: int = 0
    """Documents per task (0: all)."""
    task_source: str = "builtin:pydoc"
    """Corpus the built-in tasks are made from."""
    batch_size: int = shared("batch_size")
    device: str = shared("device")
    dtype: Dtype = shared("dtype")
    device_map: str = shared("device_map")
    max_memory: str = shared("max_memory")
    seed: int = 0
    """Seed of the built-in tasks' draws, of the harness and of the spread perplexity sample."""
    trust_task_code: bool = False
    """Let task YAMLs run the Python their !function tags name."""
    ppl_split: InitVar[str | None] = None
    """Old name of split (deprecated)."""
    ppl_tokens: InitVar[int | None] = None
    """Old name of max_tokens (deprecated)."""

    def __post_init__(self, ppl_split, ppl_tokens):
        for old, value in (("ppl_split", ppl_split), ("ppl_tokens", ppl_tokens)):
            if value is not None:  # the old keyword: passed on under the new name
                new = OLD_NAMES[old]
                if getattr(self, new) != getattr(EvalOptions, new) and getattr(self, new) != value:
                    raise TypeError(f"EvalOptions() got {old}= and {new}=; {old} is the old name of {new}")
                warnings.warn(f"EvalOptions({old}=...) is deprecated; use {new}= (as the CLI's "
                              f"--{new.replace('_', '-')})", DeprecationWarning, stacklevel=3)
                object.__setattr__(self, new, value)
        object.__setattr__(self, "tasks", _names(self.tasks))
        if isinstance(self.ppl_data, str | list):  # one source, or a list of them: the tuple the field holds
            object.__setattr__(self, "ppl_data", (self.ppl_data,) if isinstance(self.ppl_data, str)
                               else tuple(self.ppl_data))
        if self.limit is None:  # the library's old "all"
            object.__setattr__(self, "limit", 0)
        check_values(self)  # numbers and choices, after the old names are read
        check_seed(self.seed, "--seed")
        check_dispatch_options(self.device_map, self.max_memory)


def _names(tasks) -> tuple[str, ...]:
    """Task names from a comma string, or a list/tuple of names (each entry may itself be comma separated)."""
    if not isinstance(tasks, str | list | tuple) or not all(isinstance(e, str) for e in tasks):
        raise UserError(f"tasks must be text or a list of texts, got {str(repr(tasks))[:80]}")
    entries = [tasks] if isinstance(tasks, str) else list(tasks)
    return tuple(t.strip() for e in entries for t in e.split(",") if t.strip())


@dataclass
class EvalResult:
    table: pandas.DataFrame
    provenance: dict
    samples: dict
    """Per task: the harness's logged samples (each document's requests and scores)."""


def check_options(opts: EvalOptions) -> None:
    """Before anything is loaded: something to evaluate, and task files and names that exist (the values
    themselves were checked when the options were made)."""
    if not opts.tasks and not opts.ppl_data:
        raise UserError("nothing to evaluate: give --tasks and/or --ppl-data")
    for t in opts.tasks:
        if t.endswith((".yaml", ".yml")) and not Path(t).is_file():
            raise UserError(f"task config not found: {t}")
    check_task_code(opts.tasks, opts.trust_task_code)  # before any task file is parsed
    files = [t for t in opts.tasks if Path(t).exists()]
    names = [t for t in opts.tasks if t not in files]
    check_task_names(names, [n for t in files for n in _task_names(t)])


def stays_offline(model: str, opts: EvalOptions):
    """Offline mode for the block when nothing the user gave names the hub (eval/offline.py)."""
    sources = [*opts.ppl_data, *([opts.task_source] if set(opts.tasks) & set(TASKS) else [])]
    return offline(is_local(model, opts.tasks, sources, set(TASKS)))


def resolved_device(opts: EvalOptions) -> EvalOptions:
    """`opts` with device auto made the device this machine has (any other name checked)."""
    from tlm_probe.models.device import resolve_device_name

    return replace(opts, device=resolve_device_name(opts.device))


@renamed_keywords(allow_pickle="unsafe_pickle")
def load_scorer(model: str, opts: EvalOptions, unsafe_pickle: bool = False, trust_remote_code: bool = False):
    from tlm_probe.capture.loading import load_probe_model
    from tlm_probe.eval.perplexity import IdsOnly, is_prepared_or_token_file
    from tlm_probe.eval.scorer import Scorer, TextCodec

    opts = resolved_device(opts)
    pm = load_probe_model(model, opts.device, opts.dtype, trust_remote_code, unsafe_pickle,
                          device_map=opts.device_map, max_memory=opts.max_memory)
    # no text to encode
    ids_only = not opts.tasks and all(is_prepared_or_token_file(s) for s in opts.ppl_data)
    codec = IdsOnly() if pm.tokenizer is None and ids_only else TextCodec(pm.tokenizer)
    return Scorer(pm, codec, batch_size=opts.batch_size)


def run_eval(model: str, opts: EvalOptions, *, scorer=None, task_dir: Path | None = None,
             progress: bool = False) -> EvalResult:
    """Evaluate; built-in task files are written into task_dir (a temporary folder when None).
    `progress`: plain lines (a log) or a notebook line per phase (tlm_probe.progress). Device auto is
    resolved here (provenance records the device used); split auto per perplexity source (its record)."""
    check_options(opts)
    opts = resolved_device(opts)
    with stays_offline(model, opts):
        return _run_eval(model, opts, scorer, task_dir, progress)


def _run_eval(model: str, opts: EvalOptions, scorer, task_dir: Path | None, progress: bool) -> EvalResult:
    import pandas as pd

    from tlm_probe.progress import Ticker

    started = time.perf_counter()
    scorer = scorer or load_scorer(model, opts)
    rows, prov_tasks, samples = [], [], {}
    if opts.tasks:
        with (tempfile.TemporaryDirectory(prefix="tlm-eval-tasks-") as tmp,
              Ticker(f"eval: tasks {', '.join(opts.tasks)}", None, enabled=progress, announce=True)):
            folder = task_dir or Path(tmp)
            r, prov_tasks, samples = _harness(scorer, opts, folder)
            rows += r
    ppl = []
    for source in opts.ppl_data:
        with Ticker(f"eval: perplexity of {source}", None, "windows", enabled=progress) as bar:
            res = _ppl(scorer, source, resolve_split(opts.split, source, model), opts, bar.advance)
        rows += res.rows(scorer.pm.name)
        ppl.append({k: v for k, v in asdict(res).items() if k != "nll_sum"})
    table = pd.DataFrame(rows, columns=EVAL_COLUMNS)
    prov = _provenance(scorer, opts, prov_tasks, ppl, time.perf_counter() - started)
    return EvalResult(table, prov, samples)


def _harness(scorer, opts: EvalOptions, folder: Path) -> tuple[list[dict], list[dict], dict]:
    from tlm_probe.eval.harness import run_tasks, tidy_rows
    from tlm_probe.eval.task_paths import localise

    builtin = [t for t in opts.tasks if t in TASKS]
    written = [write_task(t, folder, opts.task_source, opts.seed) for t in builtin]
    paths = localise([Path(t) for t in opts.tasks if t not in TASKS and Path(t).exists()], folder,
                     _tolerant_loader())
    names = [n for t in opts.tasks for n in _task_names(t)]
    with harness_data_errors(names):
        out = run_tasks(
            scorer,
            names,
            [folder, *{p if p.is_dir() else p.parent for p in paths}] if builtin or paths else [],
            limit=opts.limit or None,
            seed=opts.seed,
            trust_code=opts.trust_task_code,
            builtin_only=len(builtin) + len(paths) == len(opts.tasks),
        )
    if out is None:
        raise UserError("lm-evaluation-harness returned no results")
    configs = out.get("configs", {})
    others = [t for t in out["results"] if t not in TASKS]
    prov = written + [{"task": t, "config_sha256": _config_hash(configs.get(t, {}))} for t in others]
    return tidy_rows(scorer.pm.name, out), prov, out.get("samples", {})


@contextlib.contextmanager
def harness_data_errors(names: list[str]):
    """What datasets raises while the harness reads a task's data (a file the check before the run could
    not judge: a malformed CSV, a JSON document of the wrong shape) is one error line naming the tasks and
    the data file datasets names, not its traceback (issue 49)."""
    from datasets.exceptions import DatasetGenerationError

    try:
        yield
    except (StopIteration, DatasetGenerationError) as e:
        cause = e.__cause__ or e.__context__
        why = str(cause or e).strip().splitlines()[0][:200] if str(cause or e).strip() else "no documents"
        raise UserError(f"lm-evaluation-harness could not read the data of task(s) {', '.join(names)}: "
                        f"{why}") from None


def _task_names(task: str) -> list[str]:
    """A YAML file stands for the task it declares, a folder for every task its YAML files declare, and
    anything else is a name for the harness to resolve."""
    p = Path(task)
    if p.is_dir():
        names = [n for f in sorted(p.glob("*.y*ml")) for n in _task_names(str(f))]
        if not names:
            raise UserError(f"task folder {task} holds no task YAML")
        return names
    if not p.is_file():
        return [task]
    import yaml

    try:  # harness YAMLs may carry tags such as !function: read only what a plain loader can
        doc = yaml.load(p.read_text(), Loader=_tolerant_loader())  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise UserError(f"cannot read task config {task}: {str(e).splitlines()[0]}") from None
    name = doc.get("task") if isinstance(doc, dict) else None
    return [name] if isinstance(name, str) else []


def _tolerant_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    return Loader


def _config_hash(config: dict) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def _ppl(scorer, source: str, split: str, opts: EvalOptions, progress=None):
    """The perplexity of one source, on `split` (--split resolved for this source)."""
    from tlm_probe.eval.perplexity import is_prepared, is_prepared_or_token_file, perplexity, source_ids

    if split == "test" and is_prepared_or_token_file(source) and not is_prepared(source):
        raise UserError(f"--split test: {source} is a token file, which has only train and val")
    ids = source_ids(source, split, scorer.codec)
    return perplexity(
        scorer, ids, source=source, split=split, context=opts.ppl_context,
        stride=opts.ppl_stride, max_tokens=opts.max_tokens or None, progress=progress,
        sample=opts.sample, seed=opts.seed,
    )


def _provenance(scorer, opts: EvalOptions, tasks: list[dict], ppl: list[dict], seconds: float) -> dict:
    import torch

    from tlm_probe.capture.dispatch import input_device, placement
    from tlm_probe.environment import machine, versions
    from tlm_probe.files.content_hash import content_hash

    pm = scorer.pm
    return {
        "model": pm.name,
        "model_path": str(pm.path.resolve()) if pm.path else pm.name,
        "content_hash": content_hash(pm.path),
        "architecture": {"family": pm.family, "model_type": pm.model_type, "n_layers": pm.n_layers,
                         "d_ff": list(pm.d_ff)},
        "tokenizer": scorer.codec.name,
        "max_length": scorer.max_length,
        "tasks": tasks,
        "perplexity": ppl,
        "options": asdict(opts),
        **({"dispatch": {"placed": placement(pm.model)}} if opts.device_map else {}),
        "threads": torch.get_num_threads(),  # the run's, after --threads set them
        "versions": versions("lm_eval"),
        "machine": machine(input_device(pm.model)),
        "seed": opts.seed,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds, 3),
    }
