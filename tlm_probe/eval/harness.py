"""The bridge to lm-evaluation-harness: a harness model (TemplateLM) that scores through our Scorer, and
one call that runs a list of tasks and returns tidy rows.

Why our own LM subclass rather than the harness's `hf` model: our byte-level checkpoints have no Hugging
Face tokenizer, and the Scorer already loads every family the probe supports (including GGUF files).
The harness does the rest exactly as for published numbers: prompts, few-shot, metrics, stderr.
lm_eval is imported here only, and only when a command runs (it takes seconds to import).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from pathlib import Path

from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from tlm_probe.eval.scorer import Scorer
from tlm_probe.progress import Ticker, no_tqdm_bars, where

DEFAULT_MAX_GEN_TOKS = 256
NOT_METRICS = ("alias", "sample_len")
HARNESS_NOISE = ("bootstrapping for stddev",)  # what lm-eval prints per metric, dropped (see _HarnessPrints)


class TLMHarnessLM(TemplateLM):
    """lm_eval model over a Scorer: loglikelihood, rolling loglikelihood and greedy generate_until. With
    `progress`, each kind of request says how many it scores, as a line before and a line after (a log or
    a notebook; a terminal has tlm eval's spinner)."""

    def __init__(self, scorer: Scorer, progress: bool = False):
        super().__init__()
        self.scorer = scorer
        self.progress = progress

    def _scoring(self, n: int, kind: str) -> Ticker:
        return Ticker(f"lm-eval: scoring {n:,} {kind} requests", None, enabled=self.progress, announce=True)

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        """The harness's own tokenizing, without its "Tokenizing inputs" bar (it passes disable=False
        itself, so TQDM_DISABLE cannot stop it; its carriage-return frames filled logs), then our scoring."""
        with self._scoring(len(requests), "loglikelihood"):
            return super().loglikelihood(requests, disable_tqdm=True)

    @property
    def eot_token_id(self) -> int:
        return self.scorer.codec.eos_id

    @property
    def max_length(self) -> int:
        return self.scorer.max_length

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> list[int]:
        return self.scorer.codec.encode(string)

    def tok_decode(self, tokens, **kwargs) -> str:
        return self.scorer.codec.decode(tokens)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs):
        results = self.scorer.loglikelihoods([(ctx, cont) for _, ctx, cont in requests])
        for (key, _, _), res in zip(requests, results, strict=True):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, res)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Each string scored as a whole in disjoint windows of the model's context (the harness's rule)."""
        with self._scoring(len(requests), "rolling loglikelihood"):
            return self._rolling(requests)

    def _rolling(self, requests) -> list[float]:
        out = []
        for (string,) in [req.args for req in requests]:
            windows = [
                make_disjoint_window(w)
                for w in get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                )
            ]
            scores = self.scorer.loglikelihoods(windows)
            total = sum(s for s, _ in scores)
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), total)
            out.append(total)
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        with self._scoring(len(requests), "generation"):
            return self._generate(requests)

    def _generate(self, requests) -> list[str]:
        out = []
        for context, gen_kwargs in [req.args for req in requests]:
            until = gen_kwargs.get("until") or [self.tok_decode([self.eot_token_id])]
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            new = self.scorer.greedy_continue(self.tok_encode(context), max_new, {self.eot_token_id})
            text = self.tok_decode(new)
            for stop in until:
                text = text.split(stop)[0] if stop else text
            out.append(text)
        return out


def run_tasks(
    scorer: Scorer,
    tasks: list[str],
    include_paths: list[Path],
    *,
    limit: int | None,
    seed: int,
    builtin_only: bool,
    trust_code: bool = False,
    progress: bool | None = None,
) -> dict:
    """simple_evaluate on our model; returns the harness's results dict (results, configs, n-samples ...).
    Task files run no Python of theirs unless `trust_code` (eval/task_code.py). `progress`: a line per kind
    of request scored (None: unless stderr is a terminal, where tlm eval shows a spinner)."""
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    from tlm_probe.eval.task_code import harness_code_guard

    logging.getLogger("lm_eval").setLevel(logging.WARNING)  # the harness logs every request at INFO
    manager = TaskManager(
        include_path=[str(p) for p in include_paths] or None, include_defaults=not builtin_only
    )
    # DISABLE_MULTIPROC: lm-eval bootstraps a stderr in one process, not in a fork Pool of cpu_count workers
    # (one 1000-draw chunk, seeded Random(i) as the Pool's: the same numbers). Tearing that Pool down hung
    # twice in CI: Pool.terminate() left one worker un-signalled and joined it forever.
    with _quiet_progress(), _environ("DISABLE_MULTIPROC", "1"), harness_code_guard(trust_code), \
            _no_env_survey(evaluator):
        return evaluator.simple_evaluate(
            model=TLMHarnessLM(scorer, progress=where() != "terminal" if progress is None else progress),
            tasks=tasks,
            task_manager=manager,
            limit=limit,
            bootstrap_iters=1000,
            log_samples=True,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )


@contextlib.contextmanager
def _no_env_survey(evaluator):
    """simple_evaluate surveys the environment on every call with no option to skip it: `git describe`
    (which prints "fatal: not a git repository" outside a checkout) and torch's collect_env (12 processes,
    `pip list` among them; measured 0.96 s of a 2.65 s run). Our provenance records the versions instead
    (eval/run.py). Only those two names in lm_eval.evaluator are replaced, and only for this call."""
    saved = evaluator.get_git_commit_hash, evaluator.add_env_info
    evaluator.get_git_commit_hash = lambda: None
    evaluator.add_env_info = lambda storage: None
    try:
        yield
    finally:
        evaluator.get_git_commit_hash, evaluator.add_env_info = saved


@contextlib.contextmanager
def _quiet_progress():
    """The harness and datasets draw a tqdm bar per step (tlm eval shows its own status; in a log a bar is
    a carriage-return frame per refresh) and the harness prints to stdout, which belongs to --json: its
    prints go to stderr, but for its notes on bootstrapping each metric's stderr."""
    import datasets

    datasets.disable_progress_bars()
    prints = _HarnessPrints(sys.stderr)
    try:
        with no_tqdm_bars(), contextlib.redirect_stdout(prints):
            yield
    finally:
        prints.close()
        datasets.enable_progress_bars()


class _HarnessPrints(io.TextIOBase):
    """stdout for the harness: whole lines to `target` (stderr), less those starting with HARNESS_NOISE
    (print() writes a line in pieces, so lines are put together first)."""

    def __init__(self, target):
        super().__init__()
        self.target, self.pending = target, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self._emit(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> None:
        if self.pending:
            self._emit(self.pending + "\n")
            self.pending = ""
        self.target.flush()
        super().close()

    def _emit(self, line: str) -> None:
        if not line.startswith(HARNESS_NOISE):
            self.target.write(line)


@contextlib.contextmanager
def _environ(name: str, value: str):
    """Set one environment variable for the block; then restore it, or remove it if it was unset."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def tidy_rows(model: str, results: dict) -> list[dict]:
    """One row per task x metric: value, stderr (None when the harness gives none) and n (documents)."""
    rows = []
    for task, metrics in results["results"].items():
        n = results.get("n-samples", {}).get(task, {}).get("effective")
        for key, value in metrics.items():
            name, _, _filter = key.partition(",")
            if name.endswith("_stderr") or name in NOT_METRICS or not isinstance(value, (int, float)):
                continue
            stderr = metrics.get(f"{name}_stderr,{_filter}")
            rows.append(
                {
                    "model": model,
                    "task": task,
                    "metric": name,
                    "value": float(value),
                    "stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
                    "n": n,
                }
            )
    return rows
