"""The tapered language model's configuration: a frozen dataclass that round-trips through config.json."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tlm_probe.models.mixer_registry import MIXER_HELP, MIXERS, REFERENCE_MIXER, SETTINGS, MixerSettings, owns
from tlm_probe.models.mixer_spec import MLPS, ConfigError
from tlm_probe.schedules.heads import head_counts, kv_counts, layer_counts
from tlm_probe.schedules.widths import ScheduleSpec, make_schedule, parse_schedule

NORM_KINDS = ("rmsnorm", "layernorm")
POSITION_KINDS = ("rope", "learned")
NORM_SCALINGS = {
    "none": lambda layer: 1.0,
    # LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in LLMs", arXiv 2502.05795): the outputs of
    # the pre-norms of layer l (1-based) times 1/sqrt(l), against the variance growth of deep pre-LN stacks
    "lns": lambda layer: 1.0 / math.sqrt(layer + 1),
}
"""cfg.norm_scaling -> the factor on the output of each pre-norm of 0-based layer `layer`."""


# Each mixer's own settings: one frozen dataclass per mixer, named by its row in models/mixer_registry.py,
# whose fields (name, type, default, docstring) TLMConfig inherits and config.json stores flat after `mixer`;
# TrainConfig and the CLI offer them (train/model_options.py), and the model, shapes, accounting and presets
# read them off the config (cfg.window, ...). MixerSettings, all of them in one class, names them for type
# checkers.


@dataclass(frozen=True)
class TLMConfig(MixerSettings):
    """A decoder-only transformer whose MLP width may change with depth (its mixers' settings: SETTINGS)."""

    vocab_size: int = 256
    """Vocabulary size (256 for the byte-level tokenizer)."""
    d_model: int = 128
    """Residual stream width."""
    n_layers: int = 4
    """Number of blocks."""
    n_heads: int = 4
    """Query heads."""
    n_kv_heads: int = 0
    """Key/value heads for grouped-query attention (0 = n_heads)."""
    d_ff: tuple[int, ...] = (512, 512, 512, 512)
    """Per-layer MLP intermediate widths d_l (0: the block has no MLP)."""
    layer_heads: tuple[int, ...] = ()
    """Per-layer query heads h_l (empty: n_heads in every layer); the head dimension stays
    d_model // n_heads, so a layer's attention width is h_l·d_head."""
    layer_kv_heads: tuple[int, ...] = ()
    """Per-layer key/value heads (empty: the uniform n_kv_heads in every layer); each divides its layer's
    query heads (grouped-query attention)."""
    mlp: str = "swiglu"
    """swiglu | gelu"""
    norm: str = "rmsnorm"
    """rmsnorm | layernorm"""
    positions: str = "rope"
    """rope | learned"""
    mixer: str = field(default=REFERENCE_MIXER, metadata={"help": MIXER_HELP})  # help: the registry rows
    # the mixers' settings (window ... cms_step_periods) come from SETTINGS and follow `mixer` in config.json
    tie_embeddings: bool = True
    """Share the input embedding and the unembedding matrix."""
    max_seq_len: int = 256
    """Longest sequence the model accepts."""
    dropout: float = 0.0
    """Dropout on attention and residual branches while training."""
    init_scale: float = 0.02
    """Standard deviation of the normal initialisation."""
    rope_theta: float = 10000.0
    """RoPE base."""
    norm_eps: float = 1e-5
    """Normalisation epsilon."""
    norm_scaling: str = "none"
    """none | lns (LayerNorm Scaling, arXiv 2502.05795: the output of every pre-norm of block l, 1-based,
    times 1/sqrt(l): ln1, ln2, Titans' norm before its sliding-window attention and the continuum-memory
    levels' own norms; the final norm is not scaled); adds no parameters."""
    schedule: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """The ScheduleSpec (as a dict) that produced d_ff, for provenance."""

    def __post_init__(self) -> None:
        for f in fields(self):  # lists (from JSON) and numpy integers become the tuples of ints declared
            if f.type == "tuple[int, ...]":
                object.__setattr__(self, f.name, tuple(int(w) for w in getattr(self, f.name)))
        self.validate()

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def heads_at(self, i: int) -> int:
        """Query heads of layer i."""
        return self.layer_heads[i] if self.layer_heads else self.n_heads

    def kv_heads_at(self, i: int) -> int:
        """Key/value heads of layer i."""
        return self.layer_kv_heads[i] if self.layer_kv_heads else self.kv_heads

    # TransformerLens's ActivationCache reads these two off model.cfg (decompose_resid, apply_ln_to_stack);
    # properties, not fields, so config.json is unchanged
    @property
    def attn_only(self) -> bool:
        return False  # every block has an MLP hook (a d_l = 0 block's mlp_out is exactly 0)

    @property
    def normalization_type(self) -> str:
        return {"rmsnorm": "RMS", "layernorm": "LN"}[self.norm]

    def norm_scale_at(self, i: int) -> float:
        """The factor on the output of layer i's pre-norms (cfg.norm_scaling; 1.0 for none)."""
        return NORM_SCALINGS[self.norm_scaling](i)

    @property
    def mlp_levels(self) -> int:
        """MLP levels per block (the mixer's row: a chain of MLPs, or one)."""
        return MIXERS[self.mixer].mlp_levels(self)

    @property
    def mean_d_ff(self) -> float:
        return sum(self.d_ff) / len(self.d_ff)

    def validate(self) -> None:
        self._validate_fields()
        for settings in SETTINGS:
            settings.validate(self)
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.kv_heads:
            raise ConfigError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.kv_heads}")
        self._validate_heads()
        if self.positions == "rope" and self.d_head % 2:
            raise ConfigError(f"RoPE needs an even head dimension, got {self.d_head}")
        if len(self.d_ff) != self.n_layers:
            raise ConfigError(f"d_ff has {len(self.d_ff)} widths but n_layers={self.n_layers}")
        if min(self.d_ff) < 0:  # 0 is a block with no MLP (schedule middle)
            raise ConfigError(f"every MLP width must be >= 0 (0: no MLP), got {min(self.d_ff)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")

    def _validate_heads(self) -> None:
        for key in ("layer_heads", "layer_kv_heads", "layer_mem_width"):
            counts = getattr(self, key)
            if counts and len(counts) != self.n_layers:
                raise ConfigError(f"{key} has {len(counts)} entries but n_layers={self.n_layers}")
            if counts and min(counts) < 1:
                raise ConfigError(f"{key}: every layer needs >= 1, got {list(counts)}")
        for settings in SETTINGS:  # a per-layer setting of another mixer's: never ignore it
            for f in fields(settings):
                if "schedule" in f.metadata and getattr(self, f.name) and not owns(self.mixer, f.name):
                    raise ConfigError(f"{f.name} is {f.metadata['what']}; mixer={self.mixer} has none")
        for i in range(self.n_layers):
            if self.heads_at(i) % self.kv_heads_at(i):
                raise ConfigError(f"layer {i}: {self.heads_at(i)} query heads are not divisible by its "
                                  f"{self.kv_heads_at(i)} key/value heads")

    def _validate_fields(self) -> None:
        MIXERS.check(self.mixer), MLPS.check(self.mlp)
        choices = {"norm": NORM_KINDS, "positions": POSITION_KINDS, "norm_scaling": tuple(NORM_SCALINGS)}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ConfigError(f"{key}={getattr(self, key)!r} is not one of {', '.join(allowed)}")
        for key in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key} must be >= 1, got {getattr(self, key)}")

    def to_dict(self) -> dict[str, Any]:
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        # absent when uniform (or norm_scaling none): an old model's config.json is written byte for byte
        for key in ("layer_heads", "layer_kv_heads", "layer_mem_width"):
            if not d[key]:
                del d[key]
        if d["norm_scaling"] == "none":
            del d["norm_scaling"]
        # the mixers' settings (inherited, so first in asdict) follow `mixer`, where config.json has them
        settings = {f.name: d.pop(f.name) for s in SETTINGS for f in fields(s) if f.name in d}
        out = {"model_type": "tlm"}
        for k, v in d.items():
            out.update({k: v, **(settings if k == "mixer" else {})})
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TLMConfig:
        known = {f.name for f in fields(cls)}
        for key, why in ((k, w) for row in MIXERS.values() for k, w in row.retired.items() if k in d):
            raise ConfigError(f"this config is of an older mixer ({key}: {why}); retrain it")
        unknown = sorted(k for k in d if k not in known and k not in _IGNORED_KEYS)
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        check_types(d)
        return cls(**{k: v for k, v in d.items() if k in known})

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> TLMConfig:
        from tlm_probe.files.jsonfile import read_json_object  # bounded: size, depth, UTF-8 (issue 36)

        return cls.from_dict(read_json_object(path))

    def replace(self, **changes: Any) -> TLMConfig:
        return replace(self, **changes)


# keys that transformers adds to config.json when the model is saved through save_pretrained
_IGNORED_KEYS = {
    "model_type", "architectures", "transformers_version", "torch_dtype", "dtype", "tie_word_embeddings",
    "auto_map",  # and save_tlm, for transformers' Auto classes (models/remote_code.py)
}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# a field's annotation -> (test of a value read from JSON, what the message says it must be)
FIELD_TYPES = {
    "int": (_is_int, "an integer"),
    "float": (lambda v: _is_int(v) or (isinstance(v, float) and math.isfinite(v)), "a finite number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "tuple[int, ...]": (lambda v: isinstance(v, list | tuple) and all(map(_is_int, v)), "a list of integers"),
    "dict[str, Any]": (lambda v: isinstance(v, dict), "a JSON object"),
}


def check_types(d: dict) -> None:
    """Each field of a config read from disk has its annotated JSON type: a string or a list where a
    number belongs would otherwise fail deep inside validation (a TypeError) or, for "48" as d_ff, be
    read digit by digit as the widths (4, 8)."""
    for f in fields(TLMConfig):
        if f.name in d:
            test, what = FIELD_TYPES[f.type]
            if not test(d[f.name]):
                raise ConfigError(f"config field {f.name} must be {what}, got {repr(d[f.name])[:60]}")


def config_with_schedule(spec: ScheduleSpec | str, d_ff: int, heads: ScheduleSpec | str | None = None,
                         kv: ScheduleSpec | str | None = None, **kwargs) -> TLMConfig:
    """A config whose per-layer widths come from a schedule with mean exactly d_ff, and, when `heads` /
    `kv` are given, whose per-layer query / key-value heads come from those schedules with means exactly
    n_heads / kv_heads (schedules/heads.py); a keyword naming a mixer row's component (mem=SPEC) tapers it.

    d_ff is the block's MLP budget as one MLP's width. Hope-attention splits it evenly over its K
    continuum-memory levels (each level of block l gets width d_l, the schedule applied to d_ff/K), so
    every mixer gets the same MLP parameters for the same d_ff."""
    n_layers = kwargs.get("n_layers", TLMConfig.n_layers)
    mixer = MIXERS.get(kwargs.get("mixer", TLMConfig.mixer))
    if mixer.splits_mlp:
        given = {f.name: kwargs[f.name] for f in fields(mixer.settings) if f.name in kwargs}
        levels = mixer.mlp_levels(mixer.settings(**given))
        spec = parse_schedule(spec) if isinstance(spec, str) else spec
        if d_ff % (levels * spec.multiple_of):
            raise ConfigError(f"{mixer.name} splits d_ff={d_ff} over {levels} {mixer.splits_mlp}: "
                              f"d_ff must be divisible by {levels}·multiple_of = {levels * spec.multiple_of}")
        d_ff //= levels
    sched = make_schedule(spec, n_layers, d_ff)
    provenance = {**sched.spec.to_dict(), "d_ff": d_ff}
    if heads is not None or kv is not None:
        counts, provenance = _head_counts(heads, kv, n_layers, kwargs, provenance)
        kwargs = {**kwargs, **counts}
    for name in [k for k in kwargs if any(k in row.components for row in MIXERS.values())]:
        kwargs, provenance = _component_counts(name, kwargs.pop(name), n_layers, kwargs, provenance)
    return TLMConfig(d_ff=sched.widths, schedule=provenance, **kwargs)


def _component_counts(name: str, spec, n_layers: int, kwargs: dict, provenance: dict) -> tuple[dict, dict]:
    """A mixer's own per-layer component (its row's `components`) from a schedule whose mean is exactly
    uniform's value (None: uniform)."""
    row = MIXERS.get(kwargs.get("mixer", TLMConfig.mixer))
    if spec is None:
        return kwargs, provenance
    if name not in row.components:
        owner = next(r for r in MIXERS.values() if name in r.components)
        field_name = owner.components[name].field
        what = next(f.metadata["what"] for f in fields(owner.settings) if f.name == field_name)
        raise ConfigError(f"a {name} schedule tapers {what}; mixer={row.name} has none")
    comp = row.components[name]
    own = {k for k in kwargs if owns(row.name, k) and k != comp.field}
    given = {k: v for k, v in kwargs.items() if k in {"n_heads", "d_model", *own}}
    base = TLMConfig(**given, mixer=row.name, n_layers=n_layers, d_ff=(0,) * n_layers)
    spec, width = parse_schedule(spec) if isinstance(spec, str) else spec, comp.uniform(base)
    unit = comp.unit if width % comp.unit == 0 else 1
    counts = layer_counts(spec, n_layers, width, unit, comp.counts)
    provenance = {**provenance, name: {**spec.to_dict(), "multiple_of": unit}}
    return {**kwargs, comp.field: tuple(counts) if len(set(counts)) > 1 else ()}, provenance


def _head_counts(heads, kv, n_layers: int, kwargs: dict, provenance: dict) -> tuple[dict, dict]:
    """layer_heads / layer_kv_heads of the heads and kv schedules (empty where they equal uniform's)."""
    base = TLMConfig(**{k: v for k, v in kwargs.items() if k in ("n_heads", "n_kv_heads", "d_model")},
                     n_layers=n_layers, d_ff=(0,) * n_layers)  # validates the uniform head counts first
    H, KV = base.n_heads, base.kv_heads
    h, k = [H] * n_layers, [KV] * n_layers
    if heads is not None:
        heads = parse_schedule(heads) if isinstance(heads, str) else heads
        h, k = head_counts(heads, n_layers, H, KV)
        provenance = {**provenance, "heads": {**heads.to_dict(), "multiple_of": H // KV}}
    if kv is not None:
        kv = parse_schedule(kv) if isinstance(kv, str) else kv
        k = kv_counts(kv, h, KV)
        provenance = {**provenance, "kv": {**kv.to_dict(), "multiple_of": 1}}
    counts = {"layer_heads": tuple(h) if set(h) != {H} else (),
              "layer_kv_heads": tuple(k) if set(k) != {KV} else ()}
    return counts, provenance
