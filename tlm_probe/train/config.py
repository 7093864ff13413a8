"""The training configuration: one frozen dataclass, read from YAML/TOML and/or CLI flags, that fully
determines a run (together with the data). It is stored as train_config.json in the run folder; a resume
with a different value of any field outside RESUME_MAY_CHANGE is refused.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from tlm_probe.data.windows import SAMPLE_HELP, SAMPLES
from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import decode_utf8, loads_bounded
from tlm_probe.models.accounting import count_params
from tlm_probe.models.config import MIXER_KINDS, NORM_SCALINGS, TLMConfig, config_with_schedule
from tlm_probe.models.mixer_registry import REFERENCE_MIXER
from tlm_probe.models.presets import PRESETS, preset_config
from tlm_probe.ranges import check_ranges
from tlm_probe.schedules.widths import check_params, parse_schedule
from tlm_probe.seeds import check_seed
from tlm_probe.train.model_options import ModelOptions, given_model_options

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

TRAIN_CONFIG_FILE = "train_config.json"
# fields that only change where/how fast a run executes or how often it reports, never what it computes
RESUME_MAY_CHANGE = {
    "device",
    "compile",
    "peak_flops",
    "keep_last",
    "ckpt_interval",
    "progress",
    "log_interval",
}
ARCH_DEFAULTS = dict(d_model=128, n_layers=4, n_heads=4, d_ff=512)


@dataclass(frozen=True)
class TrainConfig(ModelOptions):
    """A training run. Its model options (d_model, n_heads, mixer, every mixer's settings, ...) are
    TLMConfig's fields (ModelOptions, train/model_options.py); those not given come from the preset (or
    TLMConfig's defaults)."""

    data: str = "builtin:pydoc"
    """Data source (see `tlm data --help`), a prepared folder or a token file."""
    tokenizer: str = "byte"
    """byte | bpe[:VOCAB] | a Hugging Face tokenizer folder or hub name."""
    preset: str = ""
    """Model preset (tlm-tiny, tlm-small, tlm-440m, tlm-760m, tlm-1.3b); empty = flags only."""
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
    seq_len: int = 128
    """Training context length (must not exceed the model's max_seq_len)."""
    max_seq_len: int = 0
    """Model context; 0 = seq_len (or the preset's)."""
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
    log_interval: int = 10
    """Write a training line to metrics.jsonl every N steps."""
    eval_interval: int = 100
    """Evaluate every N steps."""
    eval_tokens: int = 32768
    """Predicted validation tokens in the fixed eval set."""
    eval_sample: str = field(default="spread", metadata={"help": SAMPLE_HELP})
    """Which validation windows form the eval set (data/windows.py): spread | prefix."""
    ckpt_interval: int = 0
    """Save a resumable checkpoint every N steps (0 = only at the end)."""
    keep_last: int = 2
    """Resumable checkpoints to keep."""
    seed: int = 0
    """Seed for initial weights and batch order."""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N."""
    compile: bool = False
    """torch.compile each block (train/compile.py: one graph per distinct block shape)."""
    threads: int = 0
    """CPU threads for PyTorch (0 = its default, all cores). On a machine shared with other jobs, 1 can
    be several times faster than oversubscribed threads."""
    peak_flops: float = 0.0
    """Peak FLOP/s for the MFU estimate; 0 = a table guess on known GPUs, none on CPU."""
    progress: bool = True
    """Draw a progress bar on stderr (rank 0)."""

    def __post_init__(self):
        check_ranges(self)
        _check_positive(self)
        # the one parse of the schedule spec (a bad spec is a UserError naming it); model_config uses it
        object.__setattr__(self, "schedule_spec", parse_schedule(self.schedule, self.multiple_of))
        for key in ("heads_schedule", "kv_schedule", "mem_schedule"):  # a bad spec fails here, before data
            if getattr(self, key):
                check_params(parse_schedule(getattr(self, key)))
        if self.mixer not in MIXER_KINDS:
            raise UserError(f"unknown mixer {self.mixer!r}; choose one of: {', '.join(MIXER_KINDS)}")
        if self.norm_scaling not in NORM_SCALINGS:
            raise UserError(f"unknown norm_scaling {self.norm_scaling!r}; choose one of: "
                            f"{', '.join(NORM_SCALINGS)}")
        if self.eval_sample not in SAMPLES:
            raise UserError(f"unknown eval_sample {self.eval_sample!r}; choose one of: {', '.join(SAMPLES)}")
        if self.preset and self.preset not in PRESETS:
            raise UserError(f"unknown preset {self.preset!r}; choose one of: {', '.join(PRESETS)}")
        if self.steps <= 0 and self.tokens <= 0:
            raise UserError("give a number of steps (--steps) or a token budget (--tokens)")

    @property
    def tokens_per_step(self) -> int:
        """Per process; times the world size for the global figure."""
        return self.batch_size * self.grad_accum * self.seq_len

    def total_steps(self, world: int = 1) -> int:
        return self.steps if self.steps > 0 else math.ceil(self.tokens / (self.tokens_per_step * world))

    def model_config(self, vocab_size: int) -> TLMConfig:
        """The model this run trains, with `vocab_size` from the tokenizer unless fixed by flag/preset;
        with match_params, its MLP budget shrunk to the attention model's parameter count (size_matched)."""
        cfg = self._model_config(vocab_size)
        if self.match_params and self.mixer != REFERENCE_MIXER:
            target = self.replace(mixer=REFERENCE_MIXER, match_params=False).model_config(vocab_size)
            cfg = size_matched(lambda d_ff: self._model_config(vocab_size, d_ff), cfg,
                               count_params(target).total, self.multiple_of)
        return cfg

    def _model_config(self, vocab_size: int, d_ff: int | None = None) -> TLMConfig:
        d_ff = self.d_ff if d_ff is None else d_ff
        arch = {"d_ff": d_ff} if d_ff is not None else {}
        extra = {**given_model_options(self), **self._schedules()}
        if self.max_seq_len:
            extra["max_seq_len"] = self.max_seq_len
        if self.vocab_size:
            extra["vocab_size"] = self.vocab_size
        spec = self.schedule_spec
        if self.preset:
            return preset_config(self.preset, spec, **arch, **extra)
        extra.setdefault("vocab_size", vocab_size)
        extra.setdefault("max_seq_len", self.seq_len)
        full = {**ARCH_DEFAULTS, **arch, **extra}
        return config_with_schedule(spec, full.pop("d_ff"), **full)

    def _schedules(self) -> dict:
        """The heads / kv / memory-width schedules given, as config_with_schedule's arguments."""
        out = {}
        if self.heads_schedule:
            out["heads"] = self.heads_schedule
        if self.kv_schedule:
            out["kv"] = self.kv_schedule
        if self.mem_schedule:
            out["mem"] = self.mem_schedule
        return out

    def to_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> TrainConfig:
        return replace(self, **changes)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        kinds = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(d) - set(kinds))
        if unknown:
            raise UserError(f"unknown training option(s): {', '.join(unknown)}")
        return cls(**{k: _typed(k, v, kinds[k]) for k, v in d.items()})


def size_matched(build, cfg: TLMConfig, target: int, multiple_of: int) -> TLMConfig:
    """build(d_ff) at the MLP budget d_ff <= cfg's (a multiple of multiple_of x the CMS levels, so the
    schedule can split it) whose parameter count is closest to `target` (the attention model's); on a tie
    the smaller model. The counts differ by less than one width step's parameters."""
    step = multiple_of * cfg.cms_levels
    budget = round(cfg.mean_d_ff * cfg.cms_levels)
    best = cfg
    for d_ff in range(budget - budget % step, step - 1, -step):
        try:
            candidate = build(d_ff)
        except UserError:  # the schedule cannot split a budget this small: no smaller one will do
            break
        gap, best_gap = abs(count_params(candidate).total - target), abs(count_params(best).total - target)
        if gap <= best_gap:
            best = candidate
        if count_params(candidate).total < target:
            break  # smaller budgets only move further away
    return best


# annotation -> (accepted Python types, converter for a string such as YAML's `lr: 1e-3`, words)
_KINDS = {
    "str": ((str,), None, "a string"),
    "int": ((int,), int, "an integer"),
    "int | None": ((int, type(None)), int, "an integer"),
    "float": ((int, float), float, "a number"),
    "bool": ((bool,), None, "true or false"),
}


def _typed(key: str, value, kind: str):
    """`value` checked (and a numeric string converted) against the field's type: one clear line for
    `steps: "five"` instead of a TypeError deep inside."""
    types, convert, words = _KINDS.get(kind, ((object,), None, kind))
    if isinstance(value, bool) and bool not in types and object not in types:
        raise UserError(f"option {key} must be {words}, got {value!r}")
    if isinstance(value, types):
        return value
    if isinstance(value, float) and convert is int and value.is_integer():
        return int(value)
    if isinstance(value, str) and convert is not None:
        try:
            return convert(value.strip())
        except ValueError:
            pass
    raise UserError(f"option {key} must be {words}, got {value!r}")


def _check_positive(c: TrainConfig) -> None:
    for key in (
        "seq_len",
        "batch_size",
        "grad_accum",
        "eval_interval",
        "log_interval",
        "eval_tokens",
        "keep_last",
    ):
        if getattr(c, key) < 1:
            raise UserError(f"{key} must be >= 1, got {getattr(c, key)}")
    for key in ("steps", "tokens", "warmup", "ckpt_interval", "vocab_size", "max_seq_len", "threads"):
        if getattr(c, key) < 0:
            raise UserError(f"{key} must be >= 0, got {getattr(c, key)}")
    for key, low, high in FLOAT_RANGES:
        val = getattr(c, key)
        if not math.isfinite(val):
            raise UserError(f"{key} must be a finite number, got {val}")
        if val < low or (high is not None and val >= high):
            upper = f" and < {high:g}" if high is not None else ""
            raise UserError(f"{key} must be >= {low:g}{upper}, got {val:g}")
    check_seed(c.seed)
    if not c.lr > 0:
        raise UserError(f"lr must be > 0, got {c.lr}")
    if not c.grad_clip > 0:
        raise UserError(f"grad_clip must be > 0, got {c.grad_clip}")


# float options and their allowed [low, high) ranges (None: no upper bound)
FLOAT_RANGES = (
    ("lr", 0.0, None),
    ("min_lr_ratio", 0.0, None),
    ("weight_decay", 0.0, None),
    ("beta1", 0.0, 1.0),
    ("beta2", 0.0, 1.0),
    ("grad_clip", 0.0, None),
    ("dropout", 0.0, 1.0),
    ("peak_flops", 0.0, None),
)


def read_config_file(path: str | Path) -> dict:
    """Options from a YAML (.yaml/.yml) or TOML (.toml) file; a [train] table/section is also accepted."""
    path = Path(path)
    if not path.is_file():
        kinds = ((path.is_dir(), "is a folder, not a config file"),
                 (path.exists(), "is not a regular file (a device or a pipe)"), (True, "does not exist"))
        why = next(why for hit, why in kinds if hit)
        raise UserError(f"--config {path} {why} (give a .yaml, .yml, .toml or .json file)")
    readers = {".toml": _read_toml, ".yaml": _read_yaml, ".yml": _read_yaml, ".json": _read_json}
    if path.suffix not in readers:
        raise UserError(f"config file {path} must end in .yaml, .yml, .toml or .json")
    data = readers[path.suffix](path, _config_text(path))
    if not isinstance(data, dict):
        raise UserError(f"config file {path} does not hold a mapping of options")
    if "train" in data and not isinstance(data["train"], dict):  # a [train] section holds the options
        raise UserError(f"'train' in {path} is not a mapping of options (it holds {data['train']!r:.60})")
    return data.get("train", data)


def _read_toml(path: Path, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"config file {path} is not valid TOML: {e}") from None
    except RecursionError:  # tomllib recurses once per level of nesting
        raise UserError(f"config file {path} nests too deep to read: not a config file") from None


def _config_text(path: Path) -> str:
    """The config file's text, read within the YAML reader's size bound (checked before reading)."""
    from tlm_probe.files.bounded import read_bounded
    from tlm_probe.files.yamlfile import YAML_MAX_BYTES

    where = f"config file {path}"
    return decode_utf8(read_bounded(path, YAML_MAX_BYTES, "a config file", where), where)


def _read_yaml(path: Path, text: str) -> dict:
    from tlm_probe.files.yamlfile import loads

    return loads(text, f"config file {path}")  # the one bounded YAML reader: depth, aliases


def _read_json(path: Path, text: str) -> dict:
    return loads_bounded(text.encode("utf-8"), f"config file {path}")  # the one bounded JSON parser


def config_differences(old: dict, new: TrainConfig, free: frozenset[str] = frozenset()) -> list[str]:
    """Fields (outside RESUME_MAY_CHANGE and `free`) whose value differs between a saved run and a new
    request."""
    cur = new.to_dict()
    old = {**{f.name: f.default for f in fields(TrainConfig)}, **old}  # fields added since: defaults
    keys = sorted((set(old) | set(cur)) - RESUME_MAY_CHANGE - free)
    return [f"{k}: {old.get(k)!r} -> {cur.get(k)!r}" for k in keys if old.get(k) != cur.get(k)]
