"""Every registered mixer (models/mixer_registry.py: one MixerSpec row each) through every path: its row is
complete (module and MLP module import, settings documented, help in --mixer), config, the model, shapes and
accounting read the row and name no mixer themselves, its settings reach the model from TrainConfig (so
from the CLI) and back from config.json, the model builds on the meta device with the parameter count and
tensor shapes that accounting and shapes give by formula, it runs a forward pass, and the train / compare
/ sweep / demo help offers each of its settings. A new mixer is its module plus one registry row; this test
fails until the row has every part."""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import MISSING, fields, is_dataclass

import pytest
import torch
from typer.testing import CliRunner

from cli import app
from tlm_probe.commands.options import flag_of
from tlm_probe.docstrings import field_docs
from tlm_probe.models import accounting, attention, config, mixers, shapes
from tlm_probe.models.config import SETTINGS, TLMConfig
from tlm_probe.models.mixer_registry import MIXER_HELP, MIXERS
from tlm_probe.models.mixer_spec import MLPS, MixerSpec, TrainingHooks
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.registry import import_entry
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.model_options import MIXER_FIELDS

pytestmark = pytest.mark.usefixtures("one_thread")
READERS = (config, mixers, shapes, accounting, attention)
"""The modules that build or count a mixer: each reads the registry and names no mixer itself."""


def test_every_table_knows_the_same_mixers():
    assert tuple(MIXERS) == tuple(row.name for row in MIXERS.values())


@pytest.mark.parametrize("mixer", tuple(MIXERS))
def test_a_row_has_every_part(mixer):
    row = MIXERS[mixer]
    required = [f.name for f in fields(MixerSpec) if f.default is MISSING and f.default_factory is MISSING]
    assert set(required) >= {"name", "help", "module", "shapes", "params"}
    for f in fields(MixerSpec):
        value = getattr(row, f.name)
        if f.type.startswith("Callable"):
            assert callable(value), (mixer, f.name)
    assert issubclass(import_entry(row.module), torch.nn.Module)
    assert issubclass(import_entry(row.training), TrainingHooks)
    if row.mlp_module:
        assert issubclass(import_entry(row.mlp_module), torch.nn.Module)
    assert (f"{mixer} ({row.help})" if row.help else mixer) in MIXER_HELP.split(" | ")
    if row.settings is not None:
        assert is_dataclass(row.settings) and callable(row.settings.validate)
        docs = field_docs(row.settings)
        for f in fields(row.settings):
            assert docs.get(f.name), (mixer, f.name)  # its docstring is its CLI help
            assert "schedule" not in f.metadata or f.metadata.get("what"), (mixer, f.name)
    if row.splits_mlp:
        assert row.settings is not None  # its levels are counted from its settings


def _named_mixers(module) -> list[str]:
    """String constants naming a mixer in a comparison or as a dict key: a branch or a table on its name."""
    tree, found = ast.parse(textwrap.dedent(inspect.getsource(module))), []
    for node in ast.walk(tree):
        consts = []
        if isinstance(node, ast.Compare):
            consts = [node.left, *node.comparators]
            consts += [e for c in node.comparators if isinstance(c, ast.Tuple | ast.List | ast.Set)
                       for e in c.elts]
        elif isinstance(node, ast.Dict):
            consts = [k for k in node.keys if k is not None]
        found += [c.value for c in consts if isinstance(c, ast.Constant) and c.value in tuple(MIXERS)]
    return found


@pytest.mark.parametrize("module", READERS, ids=lambda m: m.__name__)
def test_no_reader_branches_on_a_mixer_name(module):
    assert _named_mixers(module) == [], module.__name__


def test_the_name_check_sees_a_branch():
    class Branchy:  # what the check above must find
        def f(self, cfg):
            return {"titans": 1} if cfg.mixer == "hope_attention" else 0

    assert sorted(_named_mixers(Branchy)) == ["hope_attention", "titans"]


def test_every_setting_is_a_training_option_or_set_by_a_schedule():
    train = {f.name for f in fields(TrainConfig)}
    for settings in SETTINGS:
        for f in fields(settings):
            assert f.name in MIXER_FIELDS or f.metadata["schedule"] in train, f.name
            assert TLMConfig.__dataclass_fields__[f.name].default == f.default  # inherited, not copied


def test_a_setting_without_its_declared_option_stops_the_import_with_the_line_to_add():
    """ModelOptions is declared by hand (so that type checkers know it); check_model_options, run at import,
    refuses a class missing a mixer setting, or giving one another type, naming the line to write."""
    from dataclasses import make_dataclass

    from tlm_probe.train.model_options import MODEL_OPTIONS, ModelOptions, check_model_options, model_option

    def like(skip: str = "", retype: str = "") -> type:
        rows = [(f.name, "int" if f.name == retype else f.type, model_option(f.name))
                for f in fields(ModelOptions) if f.name != skip]
        return make_dataclass("Declared", rows, frozen=True)

    check_model_options(ModelOptions)
    check_model_options(like())
    with pytest.raises(RuntimeError, match=r"add mem_chunk: int \| None = model_option\('mem_chunk'\)"):
        check_model_options(like(skip="mem_chunk"))
    with pytest.raises(RuntimeError, match=r"ModelOptions.window is int; its model field makes it int \|"):
        check_model_options(like(retype="window"))
    assert MODEL_OPTIONS == ("d_model", "n_layers", "n_heads", "n_kv_heads", "mlp", "mixer", "norm_scaling",
                             "dropout")
    assert model_option("window").metadata["help"] == field_docs(TLMConfig)["window"]


def test_mixer_settings_bases_are_the_rows_settings(monkeypatch):
    """MixerSettings (TLMConfig's base) names its bases, for type checkers; rows whose settings differ stop
    the import with the line to write."""
    from tlm_probe.models import mixer_registry
    from tlm_probe.models.mixer_registry import MixerSettings

    assert MixerSettings.__bases__ == SETTINGS and TLMConfig.__bases__ == (MixerSettings,)
    monkeypatch.setattr(mixer_registry, "SETTINGS", (*SETTINGS[::-1],))
    with pytest.raises(RuntimeError, match=r"class MixerSettings\(HopeSettings, TitansSettings\)"):
        mixer_registry._check_settings()


def _given(mixer: str) -> dict:
    """Each integer setting of the mixer one above its default, as training options."""
    settings = MIXERS[mixer].settings
    ints = [f for f in fields(settings) if f.type == "int"] if settings else []
    return {f.name: f.default + 1 for f in ints}


@pytest.mark.parametrize("mixer", tuple(MIXERS))
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
    row = MIXERS[mixer]
    assert type(meta.blocks[0].attn) is import_entry(row.module)
    mlp = import_entry(row.mlp_module) if row.mlp_module else MLPS[cfg.mlp]
    assert type(meta.blocks[0].mlp) is mlp and cfg.mlp_levels == row.mlp_levels(cfg)
    if type(meta.blocks[0].attn) is attention.Attention:  # the G1 gate: the row says so
        assert (meta.blocks[0].attn.W_G is not None) == row.output_gate
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
    for kind in tuple(MIXERS):
        assert kind in mixer_help, (command, kind)
