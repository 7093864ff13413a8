"""TrainConfig's model options, made from TLMConfig's fields (models/config.py): TrainConfig declares none.

Each option keeps the model field's name and docstring (its CLI help). A training option must be able to
say "not given" so that a preset's value (or TLMConfig's default) applies: an integer field becomes
`int | None` (None: not given; the help shows the model's default), a per-layer list becomes a
comma-separated string ("": not given), and a string or number keeps the model's type and default.
"""

from __future__ import annotations

from dataclasses import field, fields, make_dataclass
from typing import Any

from tlm_probe.docstrings import field_docs
from tlm_probe.errors import UserError
from tlm_probe.models.config import SETTINGS, TLMConfig

MODEL_OPTIONS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "mlp", "mixer", "norm_scaling", "dropout")
"""TLMConfig's own fields that a training run sets under the same name. TrainConfig's d_ff (the mean width
a schedule keeps), vocab_size and max_seq_len (0: the tokenizer's / seq_len) mean something else: its own."""
MIXER_FIELDS = tuple(f.name for s in SETTINGS for f in fields(s) if "schedule" not in f.metadata)
"""Every mixer's settings (models/config.py SETTINGS) as training options, in config.json's order; a
per-layer setting that a schedule sets (layer_mem_width: --mem-schedule) is not one."""
MODEL_TYPE = "model_type"
"""Field metadata key: the TLMConfig annotation an option was made from."""
SHOWN_DEFAULT = "shown_default"
"""Field metadata key: the model's default in words, for the help of an option whose own default is None."""

# TLMConfig annotation -> (the option's annotation, its default; ...: the model field's own)
_AS_OPTION = {"int": ("int | None", None), "tuple[int, ...]": ("str", ""), "str": ("str", ...),
              "float": ("float", ...), "bool": ("bool", ...)}


def _option(f, doc: str) -> tuple:
    kind, default = _AS_OPTION[f.type]
    meta = {"help": doc, MODEL_TYPE: f.type}
    if default is ...:  # the model's own default
        return f.name, kind, field(default=f.default, metadata=meta)
    if f.type == "tuple[int, ...]":
        meta["help"] = f"{doc} Comma-separated."
    shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else str(f.default)
    if shown:
        meta[SHOWN_DEFAULT] = shown
    return f.name, kind, field(default=default, metadata=meta)


def _model_options() -> type:
    by_name = {f.name: f for f in fields(TLMConfig)}  # a help in metadata (mixer's: the registry's rows)
    docs = {**field_docs(TLMConfig), **{n: f.metadata["help"] for n, f in by_name.items()
                                         if "help" in f.metadata}}
    options = [_option(by_name[n], docs[n]) for n in (*MODEL_OPTIONS, *MIXER_FIELDS)]
    cls = make_dataclass("ModelOptions", options, frozen=True)
    cls.__doc__ = "TLMConfig's fields as training options (train/model_options.py)."
    cls.__module__, cls.__generated__ = __name__, True  # no source: docstrings.field_docs skips it
    return cls


ModelOptions: Any = _model_options()
"""The base of TrainConfig: one field per name in MODEL_OPTIONS and MIXER_FIELDS. Made at run time, so a type
checker knows none of its fields: annotated Any (a TrainConfig's model options are any value to it)."""


def given_model_options(options) -> dict:
    """The model options given (an integer not None, a list not empty; a string or number always), as
    TLMConfig keyword arguments (lists parsed)."""
    out = {}
    for f in fields(ModelOptions):
        value, kind = getattr(options, f.name), f.metadata[MODEL_TYPE]
        if kind == "tuple[int, ...]":
            if value:
                out[f.name] = _int_list(f.name, value)
        elif value is not None:
            out[f.name] = value
    return out


def _int_list(key: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise UserError(f"{key} must be comma-separated integers, got {text!r}") from None
