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


def _folder(tmp_path, names=NAMES, tie=None, sharded=False):
    folder = tmp_path / "m"
    folder.mkdir()
    config = {"model_type": "gpt2"} | ({} if tie is None else {"tie_word_embeddings": tie})
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
    ({"nothing": "cpu"}, None),  # no name shared: the loader judges (and names the unknown module)
])
def test_what_the_header_cannot_refuse_is_left_to_the_loader(tmp_path, mapping, tie):
    check_map_before_loading(str(_folder(tmp_path, tie=tie)), _map(tmp_path, mapping))


def test_no_header_no_judgement(tmp_path):
    folder = _folder(tmp_path)
    (folder / "model.safetensors").write_bytes(b"")  # unreadable: the loader says why
    check_map_before_loading(str(folder), _map(tmp_path, {}))
    check_map_before_loading(str(folder), "auto")
