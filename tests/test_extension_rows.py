"""A toy mixer, a toy importance statistic and a toy schedule, each added through its row alone (registered
here, no edit anywhere else), run through train -> probe -> plot on a tiny model. Checked against what
this file computes on its own: the toy schedule's widths in config.json, the toy mixer's training hook in
metrics.jsonl, the toy statistic's column against the trained weights read straight from safetensors."""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import tlm_probe as tp
from tlm_probe.errors import UserError
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.mixer_spec import MixerSpec, TrainingHooks
from tlm_probe.results import write_probe
from tlm_probe.schedules.widths import SCHEDULES, Shape
from tlm_probe.statistic_names import STATISTICS, StatisticSpec

pytestmark = pytest.mark.usefixtures("one_thread")
HERE = __name__  # rows name this module's objects by import path, as a package's rows name theirs


class ToyMixer(nn.Module):
    """Causal running mean of W_V x, then W_O: a token mixer with no attention weights at all."""

    def __init__(self, cfg, layer: int):
        super().__init__()
        self.W_V = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.W_O = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, positions, mask, valid=None):
        v = self.W_V(x)  # (B, T, d)
        count = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=v.dtype)[None, :, None]
        return self.W_O(v.cumsum(dim=1) / count)


class ToyHooks(TrainingHooks):
    """Counts the optimizer steps it was called before; logs the count."""

    def __init__(self, model, fsdp):
        super().__init__(model, fsdp)
        self.steps: list[int] = []

    def before_step(self, step: int) -> None:
        self.steps.append(step)

    def log(self) -> dict[str, float]:
        return {"toy_steps_seen": len(self.steps)}


def toy_rows(pm, opts, first) -> dict[str, list[dict]]:
    """toy_w_out_norm: the Frobenius norm of each layer's MLP down projection (a weights-only statistic)."""
    norms = [float(pm.mlp_down(l).weight.detach().double().norm()) for l in range(pm.n_layers)]
    return {"toy_w_out_norm": [dict(value=v, ci_low=math.nan, ci_high=math.nan, std=math.nan, n_tokens=0)
                               for v in norms]}


@pytest.fixture
def toy_rows_registered():
    MIXERS.register("toy_mean", MixerSpec(
        name="toy_mean", help="causal running mean", module=f"{HERE}:ToyMixer", training=f"{HERE}:ToyHooks",
        shapes=lambda cfg, p, l: {f"{p}.{m}.weight": (cfg.d_model, cfg.d_model) for m in ("W_V", "W_O")},
        params=lambda cfg, l: 2 * cfg.d_model * cfg.d_model))
    STATISTICS.register("toy_w_out_norm", StatisticSpec(
        compute=f"{HERE}:toy_rows", label="‖W_out‖_F (toy)", range=(0.0, math.inf), family="toy_w_out_norm"))
    # wide first half, narrow second half: r = start, then 2 - start
    SCHEDULES.register("toy-step", Shape(params=("start",), build=lambda spec, n: [
        spec.start if i < n // 2 else 2.0 - spec.start for i in range(n)]))
    yield
    MIXERS.unregister("toy_mean"), STATISTICS.unregister("toy_w_out_norm"), SCHEDULES.unregister("toy-step")


def test_toy_rows_train_probe_and_plot(tmp_path, toy_rows_registered):
    run = tmp_path / "run"
    tiny = dict(steps=3, threads=1, multiple_of=16, seq_len=16, d_model=32, n_layers=4, n_heads=2, d_ff=64,
                eval_tokens=64, batch_size=2, eval_interval=3, log_interval=1, progress=False)
    summary = tp.train(out=run, mixer="toy_mean", schedule="toy-step:1.5", **tiny)
    assert summary["step"] == 3

    cfg = json.loads((run / "config.json").read_text())
    assert cfg["mixer"] == "toy_mean"
    assert cfg["d_ff"] == [96, 96, 32, 32]  # 1.5·64 twice, 0.5·64 twice: mean 64, multiples of 16
    weights = load_file(str(run / "model.safetensors"))
    assert weights["blocks.0.attn.W_V.weight"].shape == (32, 32) and not any("W_Q" in k for k in weights)
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["toy_steps_seen"] for r in logged if r.get("kind") == "train"] == [1, 2, 3]

    res = tp.probe(run, stats="toy_w_out_norm", max_tokens=64, seq_len=16, full=True)
    toy = res.table[res.table["statistic"] == "toy_w_out_norm"].sort_values("layer")
    expected = [float(weights[f"blocks.{l}.mlp.W_out.weight"].double().norm()) for l in range(4)]
    assert toy["value"].tolist() == pytest.approx(expected, rel=1e-12)
    assert toy["d_ff"].tolist() == [96, 96, 32, 32]

    write_probe(tmp_path / "probe", res)
    fig = tp.plot([tmp_path / "probe"], kind="depth", statistic="toy_w_out_norm", out=tmp_path / "toy.png")
    assert (tmp_path / "toy.png").stat().st_size > 0
    assert any("‖W_out‖_F (toy)" in ax.get_ylabel() for ax in fig.axes)


def test_a_taken_name_is_refused_and_an_unknown_one_lists_the_rows():
    with pytest.raises(ValueError, match="registered already"):
        SCHEDULES.register("cosine", Shape())
    with pytest.raises(UserError, match="unknown mixer 'nope'; choose one of attention, gated_attention"):
        MIXERS.get("nope")


MIXER_OWN = {"models/titans.py", "models/cms.py", "models/cms_update.py", "models/cms_steps.py",
             "models/memory.py", "models/mixer_registry.py"}
"""The mixers' own modules and their rows: the only code that may name Titans or Hope."""


def _code_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Identifiers, imported names and short string constants of a module (not its comments or docstrings)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name | ast.Attribute | ast.FunctionDef | ast.ClassDef):
            out.append((node.lineno, getattr(node, "id", None) or getattr(node, "attr", None) or node.name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            module = getattr(node, "module", "") or ""
            out += [(node.lineno, n) for n in [module, *(a.name for a in node.names)]]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 40:
            out.append((node.lineno, node.value))
    return out


DECLARED = {"train/model_options.py": "ModelOptions"}
"""A class body that declares every mixer setting by name for type checkers (one line each, checked against
the rows at import): its lines may name a mixer's settings, the rest of its module may not."""


def _declared_lines(tree: ast.AST, class_name: str | None) -> set[int]:
    """The lines of the body of the module's class `class_name` (none for None)."""
    return {line for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == class_name
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}


def test_no_code_outside_a_mixers_own_modules_names_it():
    """Training hooks, init, generation and schedulable components come from the rows (models/mixer_spec.py);
    train/loop.py, models/hf.py, models/config.py and schedules/ name no mixer."""
    package = Path(tp.__file__).parent
    named = re.compile(r"titans|hope|cms|multifreq", re.IGNORECASE)
    found = []
    for p in sorted(package.rglob("*.py")):
        where = str(p.relative_to(package))
        if where in MIXER_OWN:
            continue
        tree = ast.parse(p.read_text())
        allowed = _declared_lines(tree, DECLARED.get(where))
        found += [f"{where}:{line}: {name}" for line, name in _code_names(tree)
                  if named.search(name) and line not in allowed]
    assert found == [], found
