"""TrustOptions (light: `tlm trust`'s options are generated from it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tlm_probe.capture.option_fields import Split, shared
from tlm_probe.errors import UserError
from tlm_probe.ranges import check_values
from tlm_probe.statistic_names import asked_statistics

NO_TASK = "none"
"""--task none: no task target."""
DEFAULT_STATS = ("block_influence,mlp_influence,norm_ratio_mlp,align_mlp_mid,align_abs_mlp_mid,"
                 "logit_lens_kl,ablation_dnll_mlp_zero")


@dataclass(frozen=True, kw_only=True)
class TrustOptions:
    """What `tlm trust` measures: each statistic's per-layer ranking on every corpus."""

    data: tuple[str, ...] = ()
    """A corpus to probe on (repeatable, two or more): any `tlm probe --data` source."""
    stats: str = DEFAULT_STATS
    """The per-layer statistics to judge, comma separated; the target must be among them."""
    target: str = "ablation_dnll_mlp_zero"
    """The statistic the others should agree with: what removing a layer's MLP costs."""
    min_w: float = 0.7
    """Flag a statistic whose Kendall's W across the corpora is below this."""
    min_spearman: float = 0.5
    """Flag a statistic whose rank correlation with the target (median over corpora), or between two
    corpora (the lowest pair), is below this."""
    split: Split = shared("split")
    max_tokens: int = 16_384
    """Tokens probed per corpus (0: all)."""
    seq_len: int = 0
    """Tokens per sequence (0: as tlm probe)."""
    batch_size: int = shared("batch_size")
    device: str = shared("device")
    task: tuple[str, ...] = ("pydoc-mc",)
    """A task for the accuracy target (repeatable): pydoc-mc (built in), a task YAML or an
    lm-evaluation-harness task name, scored as tlm eval scores it; none: no task target."""
    task_limit: int = 200
    """Items per task for the accuracy target (the first N; 0: all): one eval per layer plus one clean."""
    target_ablation: Literal["mlp", "block"] = "mlp"
    """What the accuracy target removes at each layer: mlp (zero its output), block (skip the block)."""
    halves: bool = True
    """Also probe each corpus's two disjoint halves (every other sequence; halves.csv), which tlm schedule
    --from-probe checks a schedule's stability with: twice the probing."""

    def __post_init__(self):
        check_values(self)
        if isinstance(self.task, str):  # the library's one comma-separated string
            object.__setattr__(self, "task", tuple(t.strip() for t in self.task.split(",") if t.strip()))
        if len(self.data) < 2:
            raise UserError("tlm trust compares rankings across corpora: give --data at least twice")
        check_distinct_corpora(self.data)
        asked_statistics(self.stats)  # `--stats bogus` names bogus, before the target is looked for in it
        names = [s.strip() for s in self.stats.split(",") if s.strip()]
        if self.target not in names:
            raise UserError(f"--target {self.target} must be one of --stats ({', '.join(names)})")
        if "none" in self.task and len(self.task) > 1:
            raise UserError("--task none means no task target: give it alone")


def check_distinct_corpora(data: tuple[str, ...]) -> None:
    """One corpus given twice (the same name, the same file or folder by another path, or a byte copy of a
    file: hashed only when two files have the same size) agrees with itself by construction: a vacuous
    agreement, refused (issue 49)."""
    from pathlib import Path

    from tlm_probe.files.content_hash import file_sha256

    def key(source: str):
        p = Path(source).expanduser()
        return ("path", str(p.resolve())) if p.exists() else ("name", source.strip())

    def same(a: str, b: str) -> bool:
        pa, pb = Path(a).expanduser(), Path(b).expanduser()
        if key(a) == key(b):
            return True
        return pa.is_file() and pb.is_file() and pa.stat().st_size == pb.stat().st_size and \
            file_sha256(pa) == file_sha256(pb)

    for j, b in enumerate(data):
        a = next((a for a in data[:j] if same(a, b)), None)
        if a is not None:
            raise UserError(f"--data {b} is the same corpus as --data {a}: a corpus agrees with itself by "
                            "construction; give two different corpora")


def wanted(tasks: tuple[str, ...]) -> bool:
    """Whether --task asks for a task target (`none`: no)."""
    return tuple(tasks) != (NO_TASK,)


def eval_options(opts: TrustOptions):
    """tlm eval's options for the trust run's tasks (checked there: names, files, task code); light, so
    that `tlm trust` checks its tasks before torch is imported."""
    from tlm_probe.eval.run import EvalOptions, check_options

    eval_opts = EvalOptions(tasks=opts.task, limit=opts.task_limit, batch_size=opts.batch_size,
                            device=opts.device, seed=0)
    check_options(eval_opts)
    return eval_opts
