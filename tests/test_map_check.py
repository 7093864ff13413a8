"""--device-map FILE judged from the checkpoint's safetensors header before anything loads
(capture/map_check.py, issue 49): the same refusals and words as the check on an empty copy of the model
(tests/test_checks_issue49.py), and no refusal where the header cannot tell."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from tlm_probe.capture.map_check import check_map_before_loading, stored_names
from tlm_probe.errors import UserError

NAMES = ["transformer.h.0.mlp.c_fc.weight", "transformer.h.1.mlp.c_fc.weight", "transformer.wte.weight"]


def _folder(tmp_path, names=NAMES, tie=None, sharded=False, model_type="gpt2"):
    folder = tmp_path / "m"
    folder.mkdir()
    config = {"model_type": model_type} | ({} if tie is None else {"tie_word_embeddings": tie})
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {n: np.zeros(3, np.float32) for n in names}
    if sharded:
        save_file(tensors, str(folder / "part-1.safetensors"))
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {n: "part-1.safetensors" for n in names}}))
    else:
        save_file(tensors, str(folder / "model.safetensors"))
    return folder


def _map(tmp_path, mapping) -> str:
    path = tmp_path / "map.json"
    path.write_text(json.dumps(mapping))
    return str(path)


@pytest.mark.parametrize("sharded", [False, True])
def test_stored_names_come_from_the_header_or_the_index(tmp_path, sharded):
    assert sorted(stored_names(_folder(tmp_path, sharded=sharded))) == sorted(NAMES)


@pytest.mark.parametrize(("mapping", "tie", "says"), [
    ({"transformer.h.0": "cpu"}, None, "places 1 of the model's 4 parameters (not transformer.h.1"),
    ({}, None, "places 0 of the model's 4 parameters"),
    ({"transformer": "cpu"}, None, "places 3 of the model's 4 parameters (not lm_head.weight"),
    ({"transformer.h": 0}, False, "places 2 of the model's 3 parameters"),
])
def test_a_map_leaving_a_stored_parameter_unplaced_is_refused(tmp_path, mapping, tie, says):
    folder = _folder(tmp_path, tie=tie)
    with pytest.raises(UserError) as e:
        check_map_before_loading(str(folder), _map(tmp_path, mapping))
    tops = "transformer, lm_head" if tie is not False else "transformer"
    assert says in str(e.value) and str(e.value).endswith(f"top-level modules: {tops}"), str(e.value)


@pytest.mark.parametrize(("mapping", "tie"), [
    ({"transformer": "cpu", "lm_head": "cpu"}, None),  # whole
    ({"": "cpu"}, None),  # the whole model under one key
    ({"transformer": "cpu"}, False),  # untied: no head without a tensor
    ({"h": "cpu", "lm_head": "cpu"}, None),  # names of another layout: the loader judges
])
def test_what_the_header_cannot_refuse_is_left_to_the_loader(tmp_path, mapping, tie):
    check_map_before_loading(str(_folder(tmp_path, tie=tie)), _map(tmp_path, mapping))


def test_no_header_no_judgement(tmp_path):
    folder = _folder(tmp_path)
    (folder / "model.safetensors").write_bytes(b"")  # unreadable: the loader says why
    check_map_before_loading(str(folder), _map(tmp_path, {}))
    check_map_before_loading(str(folder), "auto")


@pytest.mark.parametrize(("model_type", "names"), [
    ("gpt2", NAMES),  # the blocks under the base model's prefix: the stored names are the model's
    ("tlm", ["embed.W_E", "blocks.0.mlp.W_in", "ln_final.w"]),  # ours: always the model's names
])
def test_a_map_naming_nothing_of_the_model_is_refused(tmp_path, model_type, names):
    folder = _folder(tmp_path, names=names, model_type=model_type)
    with pytest.raises(UserError, match="names 'nothing', which is no module of the model; its checkpoint's "
                                        "top-level modules: "):
        check_map_before_loading(str(folder), _map(tmp_path, {"nothing": "cpu", "nothng.else": 0}))


@pytest.mark.parametrize(("model_type", "names", "mapping"), [
    ("gpt2", ["h.0.mlp.c_fc.weight", "wte.weight"], {"nothing": "cpu"}),  # no prefix stored: cannot tell
    ("gpt2", ["h.0.mlp.c_fc.weight", "wte.weight"], {"transformer": "cpu"}),  # the prefix the model adds
    ("bert", ["bert.encoder.layer.0.output.dense.weight", "bert.embeddings.word_embeddings.weight"],
     {"encoder": "cpu", "embeddings": "cpu"}),  # the base model, loaded from a checkpoint with a head
])
def test_a_map_of_another_prefix_is_left_to_the_loader(tmp_path, model_type, names, mapping):
    folder = _folder(tmp_path, names=names, model_type=model_type)
    check_map_before_loading(str(folder), _map(tmp_path, mapping))


def test_accelerates_lines_that_say_nothing_actionable_are_dropped_and_only_those():
    """Every --device-map run printed accelerate's 'Some parameters are on the meta device…' and 'The model
    weights are not tied…' (issue 49); from_pretrained_kwargs drops those two, and nothing else."""
    import logging

    from tlm_probe.capture.dispatch import NOISE, from_pretrained_kwargs

    from_pretrained_kwargs("auto", "")
    for name, prefix in NOISE.items():
        seen: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record, seen=seen: seen.append(record.getMessage())
        log = logging.getLogger(name)
        log.addHandler(handler)
        try:
            log.warning(prefix + " whatever follows")
            log.warning("a line worth reading")
        finally:
            log.removeHandler(handler)
        assert seen == ["a line worth reading"], (name, seen)
