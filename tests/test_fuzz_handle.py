"""The Python API's arguments, fuzzed: whatever a notebook passes as inputs, names, layers, edits or a
statistic's name, a Handle call ends in a result or one UserError (a KeyError for a piece the cache lacks),
never a TypeError, AttributeError or IndexError from deep inside, and never a hook left behind. A fixed,
derandomized budget in CI; TLM_FUZZ_EXAMPLES=N runs more."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_capture_api import _ZOO, build

import tlm_probe as tp
from tlm_probe.capture.cache import Cache
from tlm_probe.errors import UserError

EXAMPLES = int(os.environ.get("TLM_FUZZ_EXAMPLES", "120"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def handle():
    torch.set_num_threads(1)
    return tp.load(build("gpt2"), tokenizer=_ZOO["gpt2"][2]())


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.binary(max_size=4))
TENSORS = st.builds(lambda shape, kind: torch.zeros(shape, dtype=kind),
                    st.lists(st.integers(0, 3), max_size=4).map(tuple),
                    st.sampled_from([torch.long, torch.int32, torch.float32, torch.bool]))
ARRAYS = st.builds(lambda shape, kind: np.zeros(shape, dtype=kind),
                   st.lists(st.integers(0, 3), max_size=3).map(tuple),
                   st.sampled_from([np.int64, np.float32, np.bool_, np.uint8]))
VALUES = st.recursive(st.one_of(SCALARS, TENSORS, ARRAYS),
                      lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                                              st.dictionaries(st.text(max_size=8), inner, max_size=2)),
                      max_leaves=6)
NAMES = st.one_of(VALUES, st.lists(st.sampled_from(["mlp_out", "resid_post", "attn_out", "pattern", "mlp_in",
                                                    "bogus"]), max_size=3))
LAYERS = st.one_of(VALUES, st.lists(st.integers(-4, 4), max_size=3), st.integers(-4, 4))
EDITS = st.one_of(VALUES, st.sampled_from([tp.zero(), "zero", lambda x: x, lambda x: None, lambda x: x[:1]]),
                  st.builds(tp.add, st.sampled_from([torch.ones(64), torch.ones(3), [1.0] * 64, 0.5])))


def _ends_well(call, kind: type = Cache) -> None:
    try:
        out = call()
    except UserError:
        return
    assert isinstance(out, kind), type(out)


@FUZZ
@given(inputs=st.one_of(VALUES, st.text(max_size=30), st.lists(st.integers(0, 400), max_size=8)),
       names=NAMES, layers=LAYERS)
def test_run_with_cache_takes_anything(handle, inputs, names, layers):
    _ends_well(lambda: handle.run_with_cache(inputs, names=names, layers=layers))


@FUZZ
@given(key=st.one_of(VALUES, st.tuples(st.sampled_from(["mlp_out", "resid_pre", "resid_mid", "bogus"]),
                                       LAYERS)),
       edit=EDITS)
def test_hooks_take_anything_and_leave_nothing(handle, key, edit):
    before = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in handle.model.modules())
    ids = torch.tensor([[5, 6, 7, 8]])

    def run():
        with handle.hooks({key: edit} if _hashable(key) else [(key, edit)]):
            return handle.run_with_cache(ids, names=[])

    _ends_well(run)
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in handle.model.modules()) == before


@FUZZ
@given(name=VALUES, names=NAMES)
def test_stream_takes_anything_for_its_names(handle, name, names):
    _ends_well(lambda: handle.stream(["The quick brown fox."], lambda p: next(iter(p.values())).norm(dim=-1),
                                     names=names, name=name, seq_len=8, max_tokens=0), pd.DataFrame)


def _hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


@FUZZ
@given(schedule=st.one_of(VALUES, st.text(max_size=20), st.lists(st.integers(-5, 600), max_size=10)),
       field=st.sampled_from(["n_layers", "d_ff", "d_model", "vocab_size", "seq_len", "n_heads", "n_kv_heads",
                              "multiple_of", "start", "end", "component", "mixer", "preset", "mlp"]),
       value=VALUES)
def test_schedule_takes_anything(schedule, field, value):
    try:
        out = tp.schedule(schedule, **{field: value})
    except UserError:
        return
    assert isinstance(out, dict) and sum(out["widths"]) == out["uniform_total"]


def _options_classes() -> list[type]:
    from test_option_ranges import CHECKED

    return CHECKED


@pytest.mark.parametrize("cls", _options_classes(), ids=lambda c: c.__name__)
def test_every_options_class_takes_anything(cls):
    """Each options dataclass built from any value for any one of its fields: an instance or one
    UserError (a library call's or a --config file's value meets these first)."""
    import dataclasses

    fields = [f.name for f in dataclasses.fields(cls)]

    @FUZZ
    @given(field=st.sampled_from(fields), value=VALUES)
    def build(field, value):
        try:
            cls(**{field: value, **({} if field == "steps" else {"steps": 10} if cls.__name__ == "TrainConfig"
                                    else {})})
        except UserError:
            pass

    build()
