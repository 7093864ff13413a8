"""`tlm eval` as a library call: check the options, load the model once, run the harness tasks and the
perplexity sources, and return the tidy table (model, task, metric, value, stderr, n) with provenance.

Task names: `pydoc-mc` / `pydoc-lastword` (built here from the held-out split, see builtin_tasks), a path
to a task YAML or a folder of them (offline), or any lm-evaluation-harness task name (its dataset must be
reachable: in the cache, or online).
"""

from __future__ import annotations

import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from tlm_probe.api_names import renamed_keywords
from tlm_probe.data.sources import SPLITS
from tlm_probe.errors import UserError
from tlm_probe.eval.builtin_tasks import BUILDERS, write_task
from tlm_probe.eval.offline import is_local, offline
from tlm_probe.eval.task_code import check_task_code
from tlm_probe.eval.task_names import check_task_names
from tlm_probe.seeds import check_seed

EVAL_COLUMNS = ["model", "task", "metric", "value", "stderr", "n"]


@dataclass
class EvalOptions:
    tasks: list[str] = field(default_factory=list)
    """Harness task names, built-in task names or task YAML files/folders."""
    ppl_data: list[str] = field(default_factory=list)
    """Data sources for perplexity (any source the trainer reads)."""
    ppl_split: str = "val"
    """train | val | all: split of each perplexity source (val: held out from training)."""
    ppl_context: int = 0
    """Window length for perplexity (0: the model's context)."""
    ppl_stride: int = 0
    """Stride between perplexity windows (0: the context, i.e. disjoint windows)."""
    ppl_tokens: int = 65_536
    """Stop each perplexity source after about this many scored tokens (0: all)."""
    limit: int | None = None
    """Documents per harness task (None: all)."""
    task_source: str = "builtin:pydoc"
    """Corpus whose validation split the built-in tasks are made from."""
    batch_size: int = 8
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 0
    trust_task_code: bool = False
    """Let task YAMLs run the Python their !function tags name (refused by default)."""


@dataclass
class EvalResult:
    table: pd.DataFrame
    provenance: dict
    samples: dict
    """Per task: the harness's logged samples (each document's requests and scores)."""


def check_options(opts: EvalOptions) -> None:
    if not opts.tasks and not opts.ppl_data:
        raise UserError("nothing to evaluate: give --tasks and/or --ppl-data")
    if opts.limit is not None and opts.limit < 1:
        raise UserError(f"--limit must be >= 1, got {opts.limit}")
    if opts.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {opts.batch_size}")
    if opts.ppl_tokens < 0:  # 0 means all; below 0 would silently score one window
        raise UserError(f"--max-tokens must be >= 0 (0: all), got {opts.ppl_tokens}")
    if opts.ppl_split not in SPLITS:
        raise UserError(f"--split must be one of {', '.join(SPLITS)}, got {opts.ppl_split!r}")
    check_seed(opts.seed, "--seed")
    for t in opts.tasks:
        if t.endswith((".yaml", ".yml")) and not Path(t).is_file():
            raise UserError(f"task config not found: {t}")
    check_task_code(opts.tasks, opts.trust_task_code)  # before any task file is parsed
    files = [t for t in opts.tasks if Path(t).exists()]
    names = [t for t in opts.tasks if t not in files]
    check_task_names(names, [n for t in files for n in _task_names(t)])


def stays_offline(model: str, opts: EvalOptions):
    """Offline mode for the block when nothing the user gave names the hub (eval/offline.py)."""
    sources = [*opts.ppl_data, *([opts.task_source] if set(opts.tasks) & set(BUILDERS) else [])]
    return offline(is_local(model, opts.tasks, sources, set(BUILDERS)))


@renamed_keywords(allow_pickle="unsafe_pickle")
def load_scorer(model: str, opts: EvalOptions, unsafe_pickle: bool = False, trust_remote_code: bool = False):
    from tlm_probe.capture.loading import load_probe_model
    from tlm_probe.eval.perplexity import IdsOnly, is_token_source
    from tlm_probe.eval.scorer import Scorer, TextCodec

    pm = load_probe_model(model, opts.device, opts.dtype, trust_remote_code, unsafe_pickle)
    ids_only = not opts.tasks and all(is_token_source(s) for s in opts.ppl_data)  # no text to encode
    codec = IdsOnly() if pm.tokenizer is None and ids_only else TextCodec(pm.tokenizer)
    return Scorer(pm, codec, batch_size=opts.batch_size)


def run_eval(model: str, opts: EvalOptions, *, scorer=None, task_dir: Path | None = None,
             progress: bool = False) -> EvalResult:
    """Evaluate; built-in task files are written into task_dir (a temporary folder when None).
    `progress`: plain lines (a log) or a notebook line per phase (tlm_probe.progress)."""
    check_options(opts)
    with stays_offline(model, opts):
        return _run_eval(model, opts, scorer, task_dir, progress)


def _run_eval(model: str, opts: EvalOptions, scorer, task_dir: Path | None, progress: bool) -> EvalResult:
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
            res = _ppl(scorer, source, opts, bar.advance)
        rows += res.rows(scorer.pm.name)
        ppl.append({k: v for k, v in asdict(res).items() if k != "nll_sum"})
    table = pd.DataFrame(rows, columns=EVAL_COLUMNS)
    prov = _provenance(scorer, opts, prov_tasks, ppl, time.perf_counter() - started)
    return EvalResult(table, prov, samples)


def _harness(scorer, opts: EvalOptions, folder: Path) -> tuple[list[dict], list[dict], dict]:
    from tlm_probe.eval.harness import run_tasks, tidy_rows
    from tlm_probe.eval.task_paths import localise

    builtin = [t for t in opts.tasks if t in BUILDERS]
    written = [write_task(t, folder, opts.task_source, opts.seed) for t in builtin]
    paths = localise([Path(t) for t in opts.tasks if t not in BUILDERS and Path(t).exists()], folder,
                     _tolerant_loader())
    names = [n for t in opts.tasks for n in _task_names(t)]
    out = run_tasks(
        scorer,
        names,
        [folder, *{p if p.is_dir() else p.parent for p in paths}] if builtin or paths else [],
        limit=opts.limit,
        seed=opts.seed,
        trust_code=opts.trust_task_code,
        builtin_only=len(builtin) + len(paths) == len(opts.tasks),
    )
    if out is None:
        raise UserError("lm-evaluation-harness returned no results")
    configs = out.get("configs", {})
    others = [t for t in out["results"] if t not in BUILDERS]
    prov = written + [{"task": t, "config_sha256": _config_hash(configs.get(t, {}))} for t in others]
    return tidy_rows(scorer.pm.name, out), prov, out.get("samples", {})


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


def _ppl(scorer, source: str, opts: EvalOptions, progress=None):
    from tlm_probe.eval.perplexity import perplexity, source_ids

    ids = source_ids(source, opts.ppl_split, scorer.codec)
    return perplexity(
        scorer, ids, source=source, split=opts.ppl_split, context=opts.ppl_context,
        stride=opts.ppl_stride, max_tokens=opts.ppl_tokens or None, progress=progress,
    )


def _provenance(scorer, opts: EvalOptions, tasks: list[dict], ppl: list[dict], seconds: float) -> dict:
    from importlib.metadata import version

    import torch
    import transformers

    from tlm_probe import __version__
    from tlm_probe.code_version import code_commit
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
        "threads": torch.get_num_threads(),  # the run's, after --threads set them
        "versions": {
            "tlm_probe": __version__,
            "tlm_probe_commit": code_commit(),
            "lm_eval": version("lm_eval"),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "seed": opts.seed,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds, 3),
    }
