"""`tlm schedule --from-probe`: widths from a probe's per-layer statistic, exact budget, recorded source."""

import hashlib
import json
import math
import random

import pytest
import torch
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app
from tlm_probe.api.library import probe
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.results import write_results
from tlm_probe.schedules.rules import Rule, isotonic, widths_from_statistic
from tlm_probe.schedules.widths import ScheduleError, make_schedule, parse_schedule
from tlm_probe.tokenizer import ByteTokenizer

runner = CliRunner()


def _model(folder, scales, seed=0):
    """A 4-layer model whose MLP l writes scales[l] x its initial output."""
    torch.manual_seed(seed)
    model = TaperedLM(TLMConfig(n_layers=len(scales), d_model=64, n_heads=2, d_ff=(256,) * len(scales),
                                max_seq_len=64))
    with torch.no_grad():
        for block, s in zip(model.blocks, scales, strict=True):
            block.mlp.W_out.weight.mul_(s)
    save_tlm(model, folder)
    ByteTokenizer().save(folder)
    return folder


def _probe(model, out, stats="norm_ratio_mlp", split="all", max_tokens=1500):
    res = probe(str(model), "builtin:pydoc", stats=stats, max_tokens=max_tokens, seq_len=32, split=split,
                full=True)
    write_results(out, res.table, res.matrices, res.provenance)
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    model = _model(root / "m", [30.0, 30.0, 1e-6, 1e-6])  # the first two MLPs carry the signal
    return _probe(model, root / "p", stats="norm_ratio_mlp,ablation_dnll_mlp_zero")


# |ΔNLL|: removing a 30x random MLP from an untrained model changes the loss in either direction
@pytest.mark.parametrize("statistic,rule", [("norm_ratio_mlp", "x"), ("ablation_dnll_mlp_zero", "abs")])
def test_planted_signal_gets_most_of_the_budget(planted, tmp_path, statistic, rule):
    out = tmp_path / "s.json"
    r = runner.invoke(app, ["schedule", "--from-probe", str(planted), "--statistic", statistic, "--rule",
                            rule, "--multiple-of", "32", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    w = data["widths"]
    assert sum(w) == 4 * 256 and data["d_ff"] == 256
    # bounds 0.25..2 with two silent layers at 0.25: the signal layers hold (4 - 0.5)/4 = 87.5%
    assert (w[0] + w[1]) / sum(w) >= 0.85 and w[2] == w[3] == 64
    src = data["source"]
    results = planted / "results.parquet"
    assert src["probe_hash"] == hashlib.sha256(b"results.parquet" + results.read_bytes()).hexdigest()
    assert src["statistic"] == statistic and src["rule"]["transform"] == rule and len(src["values"]) == 4
    assert json.loads(r.stdout)["widths"] == w  # the printed schedule is the file's
    s = make_schedule(parse_schedule(str(out)), 4, 256)
    assert list(s.widths) == w and s.spec.source["probe_hash"] == src["probe_hash"]


def test_disjoint_samples_give_widths_within_one_unit(tmp_path):
    model = _model(tmp_path / "m", [4.0, 2.0, 1.0, 0.5], seed=3)
    files = []
    for split in ("train", "val"):  # builtin:pydoc's deterministic split: disjoint documents
        p = _probe(model, tmp_path / split, split=split, max_tokens=3000)
        out = tmp_path / f"{split}.json"
        r = runner.invoke(app, ["schedule", "--from-probe", str(p), "--statistic", "norm_ratio_mlp",
                                "--multiple-of", "32", "--out", str(out)])
        assert r.exit_code == 0, r.output
        files.append(json.loads(out.read_text()))
    a, b = files[0]["widths"], files[1]["widths"]
    assert files[0]["source"]["values"] != files[1]["source"]["values"]  # two different samples
    assert all(abs(x - y) <= 32 for x, y in zip(a, b, strict=True)), (a, b)
    assert a[0] > a[1] > a[2] >= a[3]  # the planted order survives


@pytest.mark.parametrize("L", [4, 9, 12, 24, 32])
def test_exact_budget_bounds_and_proportionality(L):
    rng = random.Random(L)
    for rule in (Rule(), Rule("1-x", 2.0, 0.5, 1.5, "decreasing"), Rule("abs", 1.0, 0.0, 3.0, "increasing")):
        values = [rng.uniform(-0.2, 1.0) for _ in range(L)]
        for d_ff, m in ((512, 64), (1000, 1), (768, 32)):
            widths, ratios = widths_from_statistic(values, d_ff, m, rule)
            assert sum(widths) == L * d_ff and all(w % m == 0 for w in widths)
            assert sum(ratios) == pytest.approx(L, rel=1e-12)
            assert all(rule.min_ratio * d_ff - m <= w <= rule.max_ratio * d_ff + m for w in widths)
            pairs = list(zip(widths, widths[1:], strict=False))
            if rule.monotone == "decreasing":
                assert all(x >= y for x, y in pairs)
            if rule.monotone == "increasing":
                assert all(x <= y for x, y in pairs)


def test_unbounded_widths_are_proportional_to_the_weights():
    values = [3.0, 1.0, 2.0, 2.0]  # weights x: ratios 1.5, 0.5, 1, 1 (no bound binds at 0.25..2)
    widths, ratios = widths_from_statistic(values, 100_000, 1, Rule())
    assert ratios == pytest.approx([1.5, 0.5, 1.0, 1.0], rel=1e-12)
    assert widths == [150_000, 50_000, 100_000, 100_000]
    assert widths_from_statistic([1.0] * 4, 512, 64, Rule())[0] == [512] * 4  # constant -> uniform


def test_isotonic_matches_a_brute_force_projection():
    xs = [3.0, 1.0, 2.0, 0.5, 0.7]
    fit = isotonic(xs, increasing=False)
    # independent: the best non-increasing fit pools 1.0 and 2.0 (1.5), and 0.5 and 0.7 (0.6)
    assert fit == pytest.approx([3.0, 1.5, 1.5, 0.6, 0.6])
    assert isotonic([1.0, 3.0, 2.0], increasing=True) == pytest.approx([1.0, 2.5, 2.5])


def test_bad_rules_and_values():
    with pytest.raises(ScheduleError, match="layer\\(s\\) 1"):
        widths_from_statistic([1.0, math.nan, 1.0], 512, 64, Rule())
    with pytest.raises(ScheduleError, match="min_ratio"):
        widths_from_statistic([1.0, 2.0], 512, 64, Rule(min_ratio=1.5, max_ratio=2.0))
    with pytest.raises(ScheduleError, match="max_ratio"):  # one positive weight cannot hold 4·d_ff at 2x
        widths_from_statistic([1.0, 0.0, 0.0, 0.0], 512, 64, Rule(min_ratio=0.0))
    with pytest.raises(ScheduleError, match="transform"):
        widths_from_statistic([1.0, 2.0], 512, 64, Rule(transform="log"))


def test_cli_errors_are_one_line_and_leave_files(planted, tmp_path):
    foreign = tmp_path / "mine.json"
    foreign.write_text('{"not": "a schedule"}')
    cases = [
        (["--statistic", "nope", "--out", str(tmp_path / "a.json")], "is not in the probe"),
        (["--statistic", "norm_ratio_mlp", "--out", str(foreign)], "not a schedule file"),
        (["--statistic", "norm_ratio_mlp"], "--out"),
        (["--out", str(tmp_path / "b.json")], "--statistic"),
    ]
    for args, match in cases:
        r = runner.invoke(app, ["schedule", "--from-probe", str(planted), *args])
        assert r.exit_code == 1, r.output
        err = r.stderr.strip()
        assert err.startswith("error: ") and match in err and "\n" not in err, err
    assert foreign.read_text() == '{"not": "a schedule"}'
    assert not (tmp_path / "a.json").exists()


def test_train_uniform_probe_derive_and_train_the_derived_schedule(tmp_path):
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (tmp_path / "c.txt").write_text(text)
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "u"), "--data", str(tmp_path / "c.txt"), *TINY])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["probe", str(tmp_path / "u"), "--data", str(tmp_path / "c.txt"), "--max-tokens",
                            "200", "--seq-len", "16", "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    sched = tmp_path / "s.json"
    r = runner.invoke(app, ["schedule", "--from-probe", str(tmp_path / "p"), "--statistic", "mlp_influence",
                            "--multiple-of", "16", "--out", str(sched)])
    assert r.exit_code == 0, r.output
    widths = json.loads(sched.read_text())["widths"]
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "t"), "--data", str(tmp_path / "c.txt"),
                            "--schedule", str(sched), "--json", *TINY])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "t" / "config.json").read_text())
    assert cfg["d_ff"] == widths and cfg["schedule"]["source"]["statistic"] == "mlp_influence"


def test_compare_with_an_absolute_schedule_file_arm_stays_inside_out(tmp_path):
    from tlm_probe.schedules.widths import schedule_file_dict

    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (tmp_path / "c.txt").write_text(text)
    sched = (tmp_path / "s.json").resolve()
    sched.write_text(json.dumps(schedule_file_dict([96, 32], 64, 16, {"kind": "test"})))
    r = runner.invoke(app, ["compare", "--out", str(tmp_path / "cmp"), "--data", str(tmp_path / "c.txt"),
                            "--schedules", f"uniform,{sched}", "--seeds", "0", "--json", *TINY])
    assert r.exit_code == 0, r.output
    runs = sorted(p.name for p in (tmp_path / "cmp" / "runs").iterdir())
    # before: runs/ / "/abs/s.json-s0" is the absolute path itself, outside the comparison folder
    assert runs == sorted(["uniform-s0", f"{str(sched).replace('/', '_')}-s0"])
    assert not (tmp_path / "s.json-s0").exists()
    cfg = json.loads((tmp_path / "cmp" / "runs" / runs[0 if runs[0] != "uniform-s0" else 1] / "config.json")
                     .read_text())
    assert cfg["d_ff"] == [96, 32]


# ---- issue 36: the probe table is input, not trusted: one error line, exit 1, nothing written ------------
def _table(folder, rows, header="model,layer,statistic,value,d_ff"):
    folder.mkdir()
    (folder / "results.csv").write_text("\n".join([header, *rows]) + "\n")
    return folder


def _four(values, d_ff=256):
    return [f"m,{l},s,{v},{d_ff}" for l, v in enumerate(values)]


UNTRUSTED = {
    "header only": ([], [], "holds no per-layer row"),
    "a row at layer 10**8": (["m,0,s,1.0,256", f"m,{10**8},s,1.0,256"], ["--d-ff", "256"],
                             "column 'layer' (row 3) must be an integer in -1..4,095 (found '100000000')"),
    "statistic <= 0 everywhere, rule x": (_four([-1.0, 0.0, -0.5, -2.0]), [], "no layer a positive weight"),
    "d_ff column of 10**18": (_four([1.0, 2.0, 3.0, 4.0], d_ff=10**18), [],
                              "column 'd_ff' (row 2) must be an integer in 0..1,099,511,627,776"),
    "a layer with no value": (["m,0,s,1.0,256", "m,3,s,1.0,256"], [], "no value at layer(s) 1, 2"),
    "a fractional layer": (["m,0,s,1.0,256", "m,0.5,s,1.0,256"], [],
                           "column 'layer' (row 3) must be an integer in -1..4,095 (found '0.5')"),
}


@pytest.mark.parametrize("case", list(UNTRUSTED))
def test_an_untrusted_probe_table_is_refused_and_nothing_written(tmp_path, case):
    import time

    rows, extra, needle = UNTRUSTED[case]
    probe_dir = _table(tmp_path / "p", rows)
    out = tmp_path / "s.json"
    t0 = time.perf_counter()
    r = runner.invoke(app, ["schedule", "--from-probe", str(probe_dir), "--statistic", "s", "--multiple-of",
                            "32", "--out", str(out), *extra])
    assert r.exit_code == 1, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    assert time.perf_counter() - t0 < 10  # the layer-10**8 row is refused before a table of its size


def test_a_model_refused_after_the_derivation_leaves_no_file(tmp_path):
    """Before: the file was written, then the model it describes was refused, and the file stayed."""
    probe_dir = _table(tmp_path / "p", _four([4.0, 2.0, 1.0, 0.5]))
    out = tmp_path / "s.json"
    r = runner.invoke(app, ["schedule", "--from-probe", str(probe_dir), "--statistic", "s", "--multiple-of",
                            "32", "--d-model", "96", "--heads", "5", "--out", str(out)])
    assert r.exit_code == 1 and "not divisible" in r.stderr, r.output
    assert not out.exists()


def test_derived_spec_is_the_one_read_back_and_layers_must_agree(tmp_path):
    from tlm_probe.commands.schedule_from_probe import derive_from_probe
    from tlm_probe.schedules.options import FromProbeOptions
    from tlm_probe.schedules.widths import read_schedule_file

    probe_dir = _table(tmp_path / "p", _four([4.0, 2.0, 1.0, 0.5]))
    out = tmp_path / "s.json"
    derived = derive_from_probe(FromProbeOptions(from_probe=probe_dir, statistic="s", out=out), None, 32)
    assert not out.exists()  # derived, not written
    assert derived.write() == out
    assert read_schedule_file(out).to_dict() == derived.spec.to_dict()
    base = ["schedule", "--from-probe", str(probe_dir), "--statistic", "s", "--multiple-of", "32", "--json",
            "--out", str(out)]
    r = runner.invoke(app, [*base, "--layers", "4"])  # the probe's count: accepted (as analyses/ pass it)
    assert r.exit_code == 0 and json.loads(r.stdout)["widths"] == json.loads(out.read_text())["widths"]
    for args, needle in ((["--layers", "6"], "--layers 6 differs from the probe's 4 layers"),
                         (["--start", "1.2"], "drop --start"), (["--rule", "log"], "--rule must be one of")):
        r = runner.invoke(app, [*base, *args])
        assert r.exit_code == 1 and needle in r.stderr, r.output


def test_halves_are_disjoint_and_cover_the_probed_tokens(tmp_path):
    model = _model(tmp_path / "m", [4.0, 2.0, 1.0, 0.5], seed=3)
    n = {}
    for half in ("", "a", "b"):
        res = probe(str(model), "builtin:pydoc", stats="norm_ratio_mlp", max_tokens=2000, seq_len=32,
                    split="val", half=half, full=True)
        n[half] = res.provenance["data"]["n_tokens"]
    assert n["a"] + n["b"] == n[""] and n["a"] > 0 and n["b"] > 0


def test_check_with_reports_stability_and_refuses_an_unstable_schedule(tmp_path):
    """Two halves of one probe agree (written, stability recorded); a second probe whose statistic is
    reversed across layers is refused, nothing written, unless --allow-unstable. The parity table uses
    the probed model's d_model and vocabulary, not the defaults."""
    model = _model(tmp_path / "m", [4.0, 2.0, 1.0, 0.5], seed=3)
    halves = {}
    for half in ("a", "b"):
        res = probe(str(model), "builtin:pydoc", stats="norm_ratio_mlp", max_tokens=3000, seq_len=32,
                    split="val", half=half, full=True)
        write_results(tmp_path / half, res.table, res.matrices, res.provenance)
        halves[half] = tmp_path / half
    args = ["schedule", "--from-probe", str(halves["a"]), "--statistic", "norm_ratio_mlp", "--multiple-of",
            "32", "--json"]
    ok = runner.invoke(app, [*args, "--check-with", str(halves["b"]), "--out", str(tmp_path / "s.json")])
    assert ok.exit_code == 0, ok.output
    assert "stability:" in ok.stderr and "stable" in ok.stderr
    stability = json.loads((tmp_path / "s.json").read_text())["source"]["stability"]
    assert stability["stable"] and stability["max_diff_units"] <= 1
    from tlm_probe.models.accounting import count_params
    from tlm_probe.models.config import config_with_schedule

    expect = count_params(config_with_schedule(parse_schedule("uniform", 32), 256, d_model=64, n_layers=4,
                                               n_heads=1, vocab_size=256)).total
    assert json.loads(ok.stdout)["params"] == expect  # the probed model's d_model 64 and vocabulary 256
    # a second probe whose values run the other way: planted instability
    import pandas as pd

    flipped = tmp_path / "flipped"
    table = pd.read_csv(halves["b"] / "results.csv")
    rows = table["statistic"] == "norm_ratio_mlp"
    table.loc[rows, "value"] = table.loc[rows, "value"].to_numpy()[::-1]
    flipped.mkdir()
    table.to_csv(flipped / "results.csv", index=False)
    (flipped / "provenance.json").write_text((halves["b"] / "provenance.json").read_text())
    bad = runner.invoke(app, [*args, "--check-with", str(flipped), "--out", str(tmp_path / "u.json")])
    assert bad.exit_code == 1 and "not stable" in bad.output and not (tmp_path / "u.json").exists()
    forced = runner.invoke(app, [*args, "--check-with", str(flipped), "--allow-unstable",
                                 "--out", str(tmp_path / "u.json")])
    assert forced.exit_code == 0, forced.output
    assert json.loads((tmp_path / "u.json").read_text())["source"]["stability"]["stable"] is False
