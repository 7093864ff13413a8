"""TrainConfig's model options: TLMConfig's fields (models/config.py) under the same names, declared here as
a plain dataclass so that a type checker and an editor know each one (torchtitan's job_config style).

What each option is comes from the model field: `model_option(name)` gives its help (the field's docstring)
and its default. A training option must be able to say "not given" so that a preset's value (or TLMConfig's
default) applies: an integer field becomes `int | None` (None: not given; the help shows the model's
default), a per-layer list a comma-separated string ("": not given), and a string or number keeps the
model's type and default. `check_model_options` holds the class to that at import: a mixer setting added
to the registry without its option here (or an option of the wrong type) stops the import with the line to
add. The mixer settings' lines are the one place outside a mixer's own modules that names them
(tests/test_extension_rows.py allows this class body only).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from tlm_probe.docstrings import field_docs
from tlm_probe.errors import UserError
from tlm_probe.models.config import SETTINGS, TLMConfig

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


def model_option(name: str) -> Any:
    """The dataclass field of the training option `name`, made from TLMConfig's field of that name: its
    help, and the default that says "not given" (the model's own for a string or a number)."""
    f = {f.name: f for f in fields(TLMConfig)}[name]
    doc = f.metadata.get("help") or field_docs(TLMConfig)[name]  # mixer's help: the registry's rows
    default = _AS_OPTION[str(f.type)][1]
    meta = {"help": doc, MODEL_TYPE: f.type}
    if default is ...:
        return field(default=f.default, metadata=meta)
    if f.type == "tuple[int, ...]":
        meta["help"] = f"{doc} Comma-separated."
    shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else str(f.default)
    if shown:
        meta[SHOWN_DEFAULT] = shown
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ModelOptions:
    """TLMConfig's fields as training options: the base of TrainConfig (its model section)."""

    d_model: int | None = model_option("d_model")
    n_layers: int | None = model_option("n_layers")
    n_heads: int | None = model_option("n_heads")
    n_kv_heads: int | None = model_option("n_kv_heads")
    mlp: str = model_option("mlp")
    mixer: str = model_option("mixer")
    norm_scaling: str = model_option("norm_scaling")
    dropout: float = model_option("dropout")
    # every mixer's settings (MIXER_FIELDS), in config.json's order
    window: int | None = model_option("window")
    mem_chunk: int | None = model_option("mem_chunk")
    mem_expand: int | None = model_option("mem_expand")
    mem_persistent: int | None = model_option("mem_persistent")
    conv_kernel: int | None = model_option("conv_kernel")
    cms_chunks: str = model_option("cms_chunks")
    cms_step_periods: str = model_option("cms_step_periods")


MODEL_OPTIONS = tuple(f.name for f in fields(ModelOptions) if f.name not in MIXER_FIELDS)
"""TLMConfig's own fields that a training run sets under the same name. TrainConfig's d_ff (the mean width
a schedule keeps), vocab_size and max_seq_len (0: the tokenizer's / seq_len) mean something else: its own."""


def check_model_options(cls: type = ModelOptions) -> None:
    """ModelOptions declares every mixer setting, after the model's own options, each with the annotation
    its model field's type gives (_AS_OPTION); else a RuntimeError naming the line to write."""
    declared = [f.name for f in fields(cls)]
    missing = [n for n in MIXER_FIELDS if n not in declared]
    if missing or declared[len(MODEL_OPTIONS):] != list(MIXER_FIELDS):
        model = {f.name: f.type for f in fields(TLMConfig)}
        lines = [f"{n}: {_AS_OPTION[model[n]][0]} = model_option({n!r})" for n in missing]
        raise RuntimeError(f"train/model_options.py: ModelOptions must end with the mixer settings "
                           f"{', '.join(MIXER_FIELDS)}, in that order; add {'; '.join(lines) or 'them'}")
    for f in fields(cls):
        want = _AS_OPTION[f.metadata[MODEL_TYPE]][0]
        if f.type != want:
            raise RuntimeError(f"train/model_options.py: ModelOptions.{f.name} is {f.type}; its model field "
                               f"makes it {want}")


check_model_options()


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
