"""The training configuration: one frozen dataclass composed of four sections (train/config_sections.py),
read from YAML/TOML and/or CLI flags, that fully determines a run (together with the data). It is stored,
flat, as train_config.json in the run folder; a resume with a different value of any field outside
RESUME_MAY_CHANGE is refused.
"""

from __future__ import annotations

import difflib
import functools
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeAlias

from tlm_probe.errors import UserError
from tlm_probe.files.jsonfile import decode_utf8, loads_bounded
from tlm_probe.models.accounting import count_params
from tlm_probe.models.config import NORM_SCALINGS, TLMConfig, config_with_schedule
from tlm_probe.models.mixer_registry import MIXERS, REFERENCE_MIXER
from tlm_probe.models.presets import preset_config
from tlm_probe.ranges import check_values
from tlm_probe.schedules.widths import check_params, parse_schedule
from tlm_probe.seeds import check_seed
from tlm_probe.train.config_sections import DataSection, ModelSection, OptimSection, RunSection, flat_options
from tlm_probe.train.model_options import given_model_options

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
class TrainConfig(RunSection, DataSection, OptimSection, ModelSection):
    """A training run: the fields of its four sections (train/config_sections.py: model, optim, data, run),
    flat (`cfg.lr`, train_config.json). Its model options (d_model, n_heads, mixer, every mixer's settings,
    ...) are TLMConfig's fields; those not given come from the preset (or TLMConfig's defaults)."""

    def __post_init__(self) -> None:
        check_values(self)
        _check_positive(self)
        _ = self.schedule_spec  # the one parse of the schedule spec: a bad spec is a UserError naming it
        for spec in self._schedules().values():  # a bad spec fails here, before data
            check_params(parse_schedule(spec))
        MIXERS.check(self.mixer)
        if self.norm_scaling not in NORM_SCALINGS:
            raise UserError(f"unknown norm_scaling {self.norm_scaling!r}; choose one of: "
                            f"{', '.join(NORM_SCALINGS)}")
        if self.steps <= 0 and self.tokens <= 0:
            raise UserError("give a number of steps (--steps) or a token budget (--tokens)")

    @functools.cached_property
    def schedule_spec(self):
        """The MLP width schedule, parsed (model_config uses it)."""
        return parse_schedule(self.schedule, self.multiple_of)

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
        full: dict[str, Any] = {**ARCH_DEFAULTS, **arch, **extra}
        return config_with_schedule(spec, full.pop("d_ff"), **full)

    def _schedules(self) -> dict[str, str]:
        """The heads / kv / memory-width schedules given, as config_with_schedule's arguments."""
        given = {k: getattr(self, f"{k}_schedule") for k in ("heads", "kv", "mem")}
        return {k: spec for k, spec in given.items() if spec}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def replace(self, **changes: Any) -> TrainConfig:
        return replace(self, **changes)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """From train_config.json's flat keys, or from the sections a --config file may use."""
        d = flat_options(d)
        kinds: dict[str, str] = {f.name: str(f.type) for f in fields(cls)}
        unknown = sorted(set(d) - set(kinds))
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(kinds), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UserError(f"unknown training option(s): {', '.join(unknown)}{hint}")
        return cls(**{k: _typed(k, v, kinds[k]) for k, v in d.items()})


TrainConfigLike: TypeAlias = TrainConfig | str | Path | dict[str, Any] | None
"""tp.train's and tp.compare's config: a TrainConfig, a config file (YAML/JSON/TOML), its content or None."""


def size_matched(build, cfg: TLMConfig, target: int, multiple_of: int) -> TLMConfig:
    """build(d_ff) at the MLP budget d_ff <= cfg's (a multiple of multiple_of x the CMS levels, so the
    schedule can split it) whose parameter count is closest to `target` (the attention model's); on a tie
    the smaller model. The counts differ by less than one width step's parameters."""
    step = multiple_of * cfg.mlp_levels
    budget = round(cfg.mean_d_ff * cfg.mlp_levels)
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


def _typed(key: str, value: Any, kind: str) -> Any:
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
    """What ranges.py's table (checked first) leaves open for a training run."""
    for key in ("seq_len", "eval_tokens", "keep_last"):  # 0 means "derive it" or "none" elsewhere, not here
        if getattr(c, key) < 1:
            raise UserError(f"{key} must be >= 1, got {getattr(c, key)}")
    if c.max_seq_len < 0:
        raise UserError(f"max_seq_len must be >= 0, got {c.max_seq_len}")
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


# float options outside ranges.py's table and their allowed [low, high) ranges (None: no upper bound)
FLOAT_RANGES = (("min_lr_ratio", 0.0, None), ("weight_decay", 0.0, None), ("beta1", 0.0, 1.0),
                ("beta2", 0.0, 1.0), ("grad_clip", 0.0, None), ("dropout", 0.0, 1.0))


def read_config_file(path: str | Path) -> dict:
    """Options from a YAML (.yaml/.yml) or TOML (.toml) file, flat or in sections (config_sections.py); a
    [train] table/section holding them is also accepted."""
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
    return flat_options(data.get("train", data))


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
