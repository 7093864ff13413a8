"""Every registered mixer (models/config.py MIXER_SETTINGS) through every path: its settings reach the model
from TrainConfig (so from the CLI) and back from config.json, the model builds on the meta device with the
parameter count and tensor shapes that accounting and shapes give by formula, it runs a forward pass, and
the train / compare / sweep / demo help offers each of its settings. A new mixer is one registry row plus
its module; this test fails until every table knows it."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch
from typer.testing import CliRunner

from cli import app
from tlm_probe.commands.options import flag_of
from tlm_probe.models import accounting, mixers, shapes
from tlm_probe.models.config import MIXER_KINDS, MIXER_SETTINGS, SETTINGS, TLMConfig
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.model_options import MIXER_FIELDS

pytestmark = pytest.mark.usefixtures("one_thread")


def test_every_table_knows_the_same_mixers():
    for table in (mixers.MIXERS, shapes.MIXERS, accounting.MIXER_PARAMS):
        assert tuple(table) == MIXER_KINDS


def test_every_setting_is_a_training_option_or_set_by_a_schedule():
    train = {f.name for f in fields(TrainConfig)}
    for settings in SETTINGS:
        for f in fields(settings):
            assert f.name in MIXER_FIELDS or f.metadata["schedule"] in train, f.name
            assert TLMConfig.__dataclass_fields__[f.name].default == f.default  # inherited, not copied


def _given(mixer: str) -> dict:
    """Each integer setting of the mixer one above its default, as training options."""
    settings = MIXER_SETTINGS[mixer]
    ints = [f for f in fields(settings) if f.type == "int"] if settings else []
    return {f.name: f.default + 1 for f in ints}


@pytest.mark.parametrize("mixer", MIXER_KINDS)
def test_a_mixer_builds_through_every_path(mixer):
    given = _given(mixer)
    chunks = "4,8" if mixer == "hope_attention" else ""
    tc = TrainConfig(mixer=mixer, d_model=32, n_layers=2, n_heads=2, d_ff=64, multiple_of=16, seq_len=16,
                     steps=1, schedule="cosine:1.5:0.5", cms_chunks=chunks, **given)
    cfg = tc.model_config(vocab_size=61)
    assert cfg.mixer == mixer and {k: getattr(cfg, k) for k in given} == given
    assert TLMConfig.from_dict(cfg.to_dict()) == cfg
    keys = list(cfg.to_dict())  # config.json: the settings right after `mixer`, as before they were classes
    settings = [f.name for s in SETTINGS for f in fields(s) if f.name in keys]
    assert keys[keys.index("mixer") + 1:keys.index("mixer") + 1 + len(settings)] == settings

    with torch.device("meta"):
        meta = TaperedLM(cfg)
    assert sum(p.numel() for p in meta.parameters()) == accounting.count_params(cfg).total
    assert {k: tuple(v.shape) for k, v in meta.state_dict().items()} == shapes.state_shapes(cfg)
    assert accounting.train_flops_per_token(cfg, 16) > 6 * accounting.count_params(cfg).non_embedding

    torch.manual_seed(0)
    logits = TaperedLM(cfg)(torch.randint(0, 61, (2, 16)))
    assert logits.shape == (2, 16, 61) and torch.isfinite(logits).all()


@pytest.mark.parametrize("command", ["train", "compare", "sweep", "demo"])
def test_the_cli_offers_every_mixer_and_its_settings(command):
    text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output
    for name in MIXER_FIELDS:
        assert flag_of(name) in text, (command, name)
    mixer_help = next(line for line in text.splitlines() if "--mixer " in line)  # its help: TLMConfig.mixer's
    for kind in MIXER_KINDS:
        assert kind in mixer_help, (command, kind)
