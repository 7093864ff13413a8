"""TrainConfig's fields in four sections, each declared once with its default and its help (the docstring
under it): the model, the optimisation, the data, the run. TrainConfig composes them (train/config.py);
a `--config` file may group its options under the same four names ([model], [optim], [data], [run]) or
list them flat, and train_config.json stays flat (the keys committed results and analyses read)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from tlm_probe.capture.option_fields import Sample, shared
from tlm_probe.errors import UserError
from tlm_probe.models.presets import PRESETS
from tlm_probe.train.model_options import ModelOptions

if TYPE_CHECKING:  # a registry's keys are known at run time: to a type checker, a preset is any text
    Preset: TypeAlias = str
else:  # the closed choice the CLI offers and check_values enforces (ranges.literal_values)
    Preset = Literal[("", *PRESETS)]


@dataclass(frozen=True)
class ModelSection(ModelOptions):
    """The model: TLMConfig's fields (ModelOptions: d_model, n_heads, mixer, every mixer's settings, ...),
    the preset they override and the schedules that set the per-layer widths and heads."""

    preset: Preset = ""
    """Model preset; empty = flags only."""
    schedule: str = "uniform"
    """MLP width schedule spec, as in `tlm schedule` (cosine:1.5:0.5, wider-early, ...)."""
    multiple_of: int = 64
    """Round every MLP width to a multiple of this (lower it for tiny models)."""
    heads_schedule: str = ""
    """Query-heads schedule spec, as in `tlm schedule --component heads` (cosine:1.5:0.5, explicit counts
    '12,12,8,...', ...): per-layer heads in units of one GQA group, mean exactly n_heads; empty = uniform."""
    kv_schedule: str = ""
    """Key/value-heads schedule spec (`tlm schedule --component kv`): mean exactly n_kv_heads, each dividing
    its layer's query heads; empty = uniform."""
    mem_schedule: str = ""
    """titans: memory-width schedule spec (`tlm schedule --component mem`): per-layer hidden width of each
    head's memory MLP, mean exactly mem_expand·d_head, multiples of 8; empty = uniform."""
    d_ff: int | None = None
    """Uniform (mean) MLP width; the schedule keeps n_layers·d_ff."""
    vocab_size: int = 0
    """Model vocabulary; 0 = the tokenizer's."""
    match_params: bool = False
    """Shrink this mixer's MLP budget (d_ff) to the width whose parameter count is closest to the attention
    model's of the same shape (size-matched comparisons); the exact counts are printed."""
    max_seq_len: int = 0
    """Model context; 0 = seq_len (or the preset's)."""


@dataclass(frozen=True)
class OptimSection:
    """The optimisation: how long, how many sequences a step, AdamW and its learning-rate schedule."""

    batch_size: int = 16
    """Sequences per micro-batch per process."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    steps: int = 0
    """Optimizer steps; 0 = derive from `tokens`."""
    tokens: int = 0
    """Token budget (used when steps is 0)."""
    lr: float = 3e-3
    """Peak learning rate."""
    min_lr_ratio: float = 0.1
    """Cosine decay ends at lr·min_lr_ratio."""
    warmup: int = 50
    """Linear warmup steps."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.95
    """AdamW beta2."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this."""


@dataclass(frozen=True)
class DataSection:
    """The data: what is read and tokenized, the context length, and the fixed validation set."""

    data: str = "builtin:pydoc"
    """Data source (see `tlm data --help`), a prepared folder or a token file."""
    tokenizer: str = "byte"
    """byte | bpe[:VOCAB] | a Hugging Face tokenizer folder or hub name."""
    seq_len: int = 128
    """Training context length (must not exceed the model's max_seq_len)."""
    eval_interval: int = 100
    """Evaluate every N steps."""
    eval_tokens: int = 32768
    """Predicted validation tokens in the fixed eval set."""
    eval_sample: Sample = shared("sample")


@dataclass(frozen=True)
class RunSection:
    """The run: seed, where and how fast it executes, how often it reports and keeps checkpoints."""

    seed: int = 0
    """Seed for initial weights and batch order."""
    device: str = shared("device")
    compile: bool = False
    """torch.compile each block (train/compile.py: one graph per distinct block shape)."""
    threads: int = 0
    """CPU threads for PyTorch (0 = its default, all cores). On a machine shared with other jobs, 1 can
    be several times faster than oversubscribed threads."""
    peak_flops: float = 0.0
    """Peak FLOP/s for the MFU estimate; 0 = a table guess on known GPUs, none on CPU."""
    progress: bool = True
    """Draw a progress bar on stderr (rank 0)."""
    log_interval: int = 10
    """Write a training line to metrics.jsonl every N steps."""
    ckpt_interval: int = 0
    """Save a resumable checkpoint every N steps (0 = only at the end)."""
    keep_last: int = 2
    """Resumable checkpoints to keep."""


SECTIONS = {"model": ModelSection, "optim": OptimSection, "data": DataSection, "run": RunSection}
"""Section name -> its fields' class: the shape a --config file may take."""


def flat_options(options: dict[str, Any]) -> dict[str, Any]:
    """A mapping of training options in sections ({"optim": {"lr": ...}, ...}) or flat, as flat keywords
    (a flat key beside the sections wins); a key under a section it is not in is refused (one line)."""
    out, flat = {}, {k: v for k, v in options.items() if not (k in SECTIONS and isinstance(v, dict))}
    for name, cls in SECTIONS.items():
        given = options.get(name) if isinstance(options.get(name), dict) else {}
        wrong = sorted(set(given) - {f.name for f in fields(cls)})
        if wrong:
            owner = {f.name: n for n, c in SECTIONS.items() for f in fields(c)}
            where = ", ".join(f"{k} (in [{owner[k]}])" if k in owner else f"{k} (unknown)" for k in wrong)
            raise UserError(f"section [{name}] of the training options does not hold {where}")
        out.update(given)
    return {**out, **flat}
