"""The allocation zoo (openelm, middle, hourglass, reversed tapers, grouped controls) against closed forms.

Widths are integers, so every comparison with a real-valued closed form allows one rounding unit
(multiple_of) per layer: largest remainder moves a width by at most one unit from floor(ideal)."""

import json
import math

import pytest
import torch
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app
from tlm_probe.models.accounting import count_params
from tlm_probe.models.config import TLMConfig, config_with_schedule
from tlm_probe.models.io import load_tlm, save_tlm
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.schedules.widths import (
    ScheduleError,
    ScheduleSpec,
    make_schedule,
    parse_schedule,
    schedule_file_dict,
)

LAYERS = (4, 9, 12, 24, 32)
ZOO = ("openelm", "middle", "middle:0.5", "hourglass", "hourglass:0.5:0.25", "cosine:0.5:1.5",
       "linear:0.5:1.5", "wider-early", "wider-middle", "wider-late", "uniform", "cosine")


@pytest.mark.parametrize("L", LAYERS)
@pytest.mark.parametrize("text", ZOO)
def test_exact_budget_and_multiples(text, L):
    for multiple_of, d_ff in ((64, 512), (1, 1000), (128, 1024)):
        s = make_schedule(parse_schedule(text, multiple_of), L, d_ff)
        assert sum(s.widths) == L * d_ff
        assert all(w % multiple_of == 0 and w >= 0 for w in s.widths)


def test_openelm_is_linear_growth_with_its_multipliers():
    L, d_ff = 12, 100_000
    s = make_schedule(parse_schedule("openelm", 1), L, d_ff)
    assert (s.spec.start, s.spec.end) == (0.5, 4.0)  # OpenELM's FFN multiplier range by default
    mean = (0.5 + 4.0) / 2
    for l, w in enumerate(s.widths):
        ref = (0.5 + 3.5 * l / (L - 1)) / mean * d_ff
        assert abs(w - ref) <= 1
    assert s.monotone.startswith("non-decreasing") and "not a taper" in s.monotone
    assert s.widths.index(min(s.widths)) == 0 and s.widths[-1] == max(s.widths)


@pytest.mark.parametrize("L,fraction,first,k", [(12, 0.7, 2, 8), (9, 0.7, 1, 6), (4, 0.5, 1, 2),
                                                (32, 0.7, 5, 22), (24, 0.7, 3, 17), (10, 1.0, 0, 10)])
def test_middle_places_the_mlps_centred(L, fraction, first, k):
    d_ff = 512
    s = make_schedule(parse_schedule(f"middle:{fraction}"), L, d_ff)
    assert k == math.floor(fraction * L + 0.5)
    with_mlp = [i for i, w in enumerate(s.widths) if w > 0]
    assert with_mlp == list(range(first, first + k))
    assert s.no_mlp_layers == tuple(i for i in range(L) if i not in with_mlp)
    ideal = L * d_ff / k  # the whole budget shared by the k blocks
    assert all(abs(s.widths[i] - ideal) < 64 for i in with_mlp)


def _hourglass_ref(t: float, waist: float, depth: float) -> float:
    # independent closed form: log-width linear in |t - depth|, 0 at the ends, log(waist) at the waist
    if t <= depth:
        frac = 1.0 if depth == 0 else (depth - t) / depth
    else:
        frac = (t - depth) / (1.0 - depth)
    return math.exp(math.log(waist) * (1.0 - frac))


@pytest.mark.parametrize("L,waist,depth", [(12, 0.3, 0.75), (9, 0.3, 0.75), (24, 0.5, 0.5), (5, 0.3, 0.75)])
def test_hourglass_closed_form_and_extrema(L, waist, depth):
    d_ff = 100_000
    s = make_schedule(ScheduleSpec("hourglass", waist=waist, waist_depth=depth, multiple_of=1), L, d_ff)
    ref = [_hourglass_ref(l / (L - 1), waist, depth) for l in range(L)]
    mean = sum(ref) / L
    assert all(abs(w - r / mean * d_ff) <= 1 for w, r in zip(s.widths, ref, strict=True))
    waist_layer = min(range(L), key=lambda l: abs(l / (L - 1) - depth))
    assert s.widths.index(min(s.widths)) == waist_layer
    left, right = s.widths[: waist_layer + 1], s.widths[waist_layer:]
    assert all(a >= b for a, b in zip(left, left[1:], strict=False))  # narrowing to the waist
    assert all(a <= b for a, b in zip(right, right[1:], strict=False))  # widening after it
    if (L - 1) * depth == waist_layer:  # a layer sits exactly on the waist: ratio waist/ends is `waist`
        assert s.widths[waist_layer] / s.widths[0] == pytest.approx(waist, abs=2 / s.widths[0])


def test_reversed_taper_is_labelled_a_control():
    fwd = make_schedule("cosine:1.5:0.5", 12, 100_000 // 64 * 64)
    rev = make_schedule("cosine:0.5:1.5", 12, 100_000 // 64 * 64)
    assert fwd.monotone == "non-increasing (a taper)"
    assert rev.monotone == "non-decreasing (reversed; a control, not a taper)"
    assert all(abs(a - b) <= 64 for a, b in zip(fwd.widths, rev.widths[::-1], strict=True))
    assert make_schedule("uniform", 4, 256).monotone == "constant"
    assert "not a taper" in make_schedule("hourglass", 12, 512).monotone


@pytest.mark.parametrize("L", [3, 4, 5, 7, 8, 9, 10, 11, 12, 24, 32])
@pytest.mark.parametrize("factor", [1.25, 1.5])
def test_grouped_controls_move_the_same_capacity(L, factor):
    d_ff, unit = 512, 64
    expected = math.floor((factor - 1) * d_ff / unit * L / 3 + 0.5) * unit
    for g, name in enumerate(("wider-early", "wider-middle", "wider-late")):
        s = make_schedule(ScheduleSpec(name, wide_factor=factor), L, d_ff)
        wide = [i for i in range(L) if (i * 3) // L == g]
        gained = sum(s.widths[i] - d_ff for i in wide)
        assert gained == expected == s.moved  # before this change: 3 vs 2 layers' worth at L=8
        assert sum(s.widths) == L * d_ff
        assert min(s.widths[i] for i in wide) >= max(s.widths[i] for i in range(L) if i not in wide)


def test_grouped_divisible_case_is_the_closed_form():
    s = make_schedule(ScheduleSpec("wider-early", wide_factor=1.5), 12, 512)
    assert s.widths == (768,) * 4 + (384,) * 8  # 1.5·d_ff and (12 - 1.5·4)/8·d_ff = 0.75·d_ff
    late = make_schedule(ScheduleSpec("wider-late", wide_factor=1.5), 8, 256)
    assert late.monotone.startswith("non-decreasing")  # leftovers placed to keep wider-late monotone
    early = make_schedule(ScheduleSpec("wider-early", wide_factor=1.5), 8, 256)
    assert early.monotone.startswith("non-increasing")


def test_parse_zoo_strings():
    assert parse_schedule("middle:0.6").fraction == 0.6
    h = parse_schedule("hourglass:0.4:0.5")
    assert (h.waist, h.waist_depth) == (0.4, 0.5)
    assert (parse_schedule("openelm:1:3").start, parse_schedule("openelm:1:3").end) == (1.0, 3.0)
    with pytest.raises(ScheduleError, match="at most 1"):
        parse_schedule("middle:0.5:3")


@pytest.mark.parametrize("text,match", [("middle:1.5", "fraction"), ("middle:0", "fraction"),
                                        ("hourglass:1.5", "waist"), ("hourglass:0.3:1.2", "waist_depth"),
                                        ("wider-early:0.5", "wide_factor"), ("hourglass:nan", "waist")])
def test_zoo_bad_parameters_name_the_value(text, match):
    with pytest.raises(ScheduleError, match=match):
        make_schedule(parse_schedule(text), 12, 512)


def test_schedule_file_round_trip(tmp_path):
    widths = [768, 768, 512, 0]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schedule_file_dict(widths, 512, 256, {"statistic": "x"})))
    spec = parse_schedule(str(path))
    s = make_schedule(spec, 4, 512)
    assert list(s.widths) == widths and spec.source["statistic"] == "x"
    with pytest.raises(ScheduleError, match="budget"):
        make_schedule(spec, 4, 768)
    with pytest.raises(ScheduleError, match="4 widths"):
        make_schedule(spec, 5, 512)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ScheduleError, match="not a schedule file"):
        parse_schedule(str(tmp_path / "bad.json"))


def test_cli_prints_parity_labels_and_no_mlp_blocks():
    runner = CliRunner()
    args = ["schedule", "--layers", "12", "--d-ff", "512", "--d-model", "128", "--vocab-size", "256",
            "--seq-len", "128", "--schedule", "middle", "--json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["parity"] and out["total"] == 12 * 512
    assert out["no_mlp_layers"] == [0, 1, 10, 11] and out["widths"][0] == 0
    r = runner.invoke(app, [*args[:-2], "openelm"])
    assert r.exit_code == 0, r.output
    assert "reversed" in r.output and "parity: yes" in r.output


# ---- d_l = 0: a block with no MLP, everywhere -------------------------------------------------------

NO_MLP = (0, 256, 256, 0)


def _middle_cfg(**kw) -> TLMConfig:
    cfg = config_with_schedule("middle:0.5", 128, n_layers=4, d_model=64, n_heads=2, max_seq_len=32, **kw)
    assert cfg.d_ff == NO_MLP
    return cfg


@pytest.mark.parametrize("mixer", tuple(MIXERS))
@pytest.mark.parametrize("sched", ["middle", "hourglass", "openelm", "wider-late"])
def test_numel_on_meta_equals_accounting(mixer, sched):
    kw = dict(n_layers=9, d_model=64, n_heads=2, mixer=mixer, max_seq_len=64)
    d_ff = 2048 if mixer == "hope_attention" else 512  # Hope splits d_ff over its 4 CMS levels
    cfg = config_with_schedule(sched, d_ff, **kw)
    uniform = config_with_schedule("uniform", d_ff, **kw)
    with torch.device("meta"):
        model = TaperedLM(cfg)
    numel = sum(p.numel() for p in model.parameters())
    assert numel == count_params(cfg).total == count_params(uniform).total
    # Hope's continuum-memory levels 2..K own a pre-norm inside b.mlp; the accounting books every norm
    # under `norms` (models/accounting.py), so the MLP's count is its matrices and step sizes
    mlp_numel = [sum(p.numel() for n, p in b.mlp.named_parameters() if "norm" not in n) for b in model.blocks]
    assert mlp_numel == [layer.mlp for layer in count_params(cfg).layers]


def test_no_mlp_block_adds_exactly_zero_and_learns_nothing_there():
    torch.manual_seed(0)
    model = TaperedLM(_middle_cfg())
    ids = torch.randint(0, 256, (2, 16))
    _, cache = model.run_with_cache(ids)
    for l in (0, 3):  # an empty sum is exactly 0: no rounding involved
        assert torch.count_nonzero(cache[f"blocks.{l}.hook_mlp_out"]) == 0
        assert torch.equal(cache[f"blocks.{l}.hook_resid_post"], cache[f"blocks.{l}.hook_resid_mid"])
        assert cache[f"blocks.{l}.mlp.hook_post"].shape == (2, 16, 0)
    assert cache["blocks.1.hook_mlp_out"].abs().mean() > 0
    model(ids, return_type="loss").backward()
    assert torch.count_nonzero(model.blocks[0].ln2.weight.grad) == 0  # its norm feeds nothing
    assert model.blocks[1].mlp.W_out.weight.grad.abs().sum() > 0


def test_no_mlp_checkpoint_hf_and_state_round_trips(tmp_path):
    from transformers import AutoModelForCausalLM

    import tlm_probe
    from tlm_probe.train.checkpoint import load_state, save_state

    tlm_probe.register_with_transformers()  # model_type "tlm" with the Auto classes (the docs' step)
    torch.manual_seed(1)
    model = TaperedLM(_middle_cfg()).eval()
    ids = torch.randint(0, 256, (2, 16))
    ref = model(ids)
    # same modules, same kernels in one process: any difference beyond a few float32 ulps of the logits
    # (|logit| ~ 1, eps 1.2e-7) would be a different computation
    tol = dict(rtol=0, atol=1e-6)
    save_tlm(model, tmp_path / "ck")
    torch.testing.assert_close(load_tlm(tmp_path / "ck")(ids), ref, **tol)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "ck").eval()
    torch.testing.assert_close(hf(ids).logits, ref, **tol)
    hf.save_pretrained(tmp_path / "hf")
    torch.testing.assert_close(load_tlm(tmp_path / "hf")(ids), ref, **tol)
    save_state(tmp_path / "run", model.state_dict(), {}, 1, 10, keep_last=2)
    sd, _, _ = load_state(tmp_path / "run")
    # before: every empty tensor has data_ptr 0 and was dropped as a "tied" copy of the first one
    assert {k for k, v in sd.items() if v.numel() == 0} == {
        k for k, v in model.state_dict().items() if v.numel() == 0}


def test_probe_has_no_mlp_rows_for_blocks_without_mlp(tmp_path):
    from tlm_probe.api.library import probe
    from tlm_probe.tokenizer import ByteTokenizer

    torch.manual_seed(2)
    save_tlm(TaperedLM(_middle_cfg()), tmp_path / "ck")
    ByteTokenizer().save(tmp_path / "ck")
    stats = ("alignment,ablation_dnll_mlp_zero,ablation_dnll_block_skip,stable_rank_mlp_out,"
             "dead_neuron_frac,spearman_block_influence")
    res = probe(str(tmp_path / "ck"), "builtin:pydoc", stats=stats, max_tokens=600, seq_len=32, full=True)
    t = res.table
    for l in (0, 3):
        names = set(t[t.layer == l].statistic)
        assert not any("mlp" in s for s in names) and "dead_neuron_frac" not in names
        assert {"block_influence", "attn_influence", "align_attn_pre", "resid_norm_growth",
                "ablation_dnll_block_skip"} <= names
        assert (t[t.layer == l].d_ff == 0).all()
    for l in (1, 2):
        assert {"align_mlp_mid", "mlp_influence", "ablation_dnll_mlp_zero", "stable_rank_mlp_out"} <= set(
            t[t.layer == l].statistic)
    assert res.provenance["no_mlp_layers"] == [0, 3] and "no MLP" in res.provenance["no_mlp_note"]
    rho = res.agreement[res.agreement.statistic == "spearman_block_influence"]
    assert len(rho) == 1 and int(rho.n_layers.iloc[0]) == 2  # compared over the 2 blocks with an MLP


def test_train_probe_and_plot_a_middle_model(tmp_path):
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (tmp_path / "c.txt").write_text(text)
    runner = CliRunner()
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "run"), "--data", str(tmp_path / "c.txt"),
                            "--schedule", "middle:0.5", "--json", *TINY])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["d_ff"] == [128, 0]
    r = runner.invoke(app, ["probe", str(tmp_path / "run"), "--data", str(tmp_path / "c.txt"),
                            "--max-tokens", "200", "--seq-len", "16", "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    assert "no MLP" in r.output
    r = runner.invoke(app, ["plot", str(tmp_path / "p"), "--statistic", "align_mlp_mid",
                            "--out", str(tmp_path / "f.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "f.png").stat().st_size > 0


def test_sweep_accepts_zoo_shapes():
    from tlm_probe.errors import UserError
    from tlm_probe.train.sweep import grid_arms

    arms = grid_arms(["cosine", "middle", "hourglass:0.3:0.75", "openelm"], [(1.5, 0.5), (0.5, 1.5)])
    assert arms == ["uniform", "cosine:1.5:0.5", "cosine:0.5:1.5", "middle", "hourglass:0.3:0.75", "openelm"]
    with pytest.raises(UserError, match="fraction"):
        grid_arms(["middle:2"], [(1.5, 0.5)])
