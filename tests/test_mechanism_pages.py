"""The mechanism numbers users read (docs/studies/mechanism.md's tables and text, the README's two
paragraphs) are the committed result files' (analyses/results/mechanism: profiles.csv, pooled.csv,
quantization.csv), rounded as printed; tests/test_mechanism_real_models.py recomputes those files from the
per-model probes. A number typed by hand, or a rerun without the pages following, fails here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analyses" / "results" / "mechanism"
PAGE = (ROOT / "docs" / "studies" / "mechanism.md").read_text()
README = " ".join((ROOT / "README.md").read_text().split())
TEXT = " ".join(PAGE.split())
"""The page's and the README's text with line breaks as spaces (a phrase may wrap)."""
LABELS = {"smollm2": "SmolLM2-135M-Instruct", "gemma3-270m": "Gemma 3 270M", "minilm": "all-MiniLM-L6-v2",
          "stories260k": "stories260K", "babyllama": "BabyLlama", "llama2xs": "llama2xs"}
FEW_LAYERS = 5
"""Models of this many layers are printed without a CI (ρ = ±1 is their only p < 0.05)."""


def signed(x: float, digits: int = 2) -> str:
    """+0.66, −0.54: as the pages print a signed number (a true minus sign)."""
    return f"{x:+.{digits}f}".replace("-", "−")


def _profile(model: str, corpus: str) -> pd.Series:
    p = pd.read_csv(RESULTS / "profiles.csv")
    (row,) = p[(p.model == model) & (p.corpus == corpus) & (p.statistic == "align_mlp_mid")].itertuples()
    return row


def _cell(row) -> str:
    text = signed(row.rho)
    if row.n_layers > FEW_LAYERS:
        text += f" [{signed(row.ci_low)}, {signed(row.ci_high)}]"
    return text


@pytest.mark.parametrize("model", LABELS)
def test_each_models_row_is_its_profile(model):
    (line,) = [ln for ln in PAGE.splitlines() if ln.startswith(f"| {LABELS[model]} |")
               and "Spearman" not in ln and ln.count("|") == 6]
    cells = [c.strip().replace("*", "") for c in line.strip("|").split("|")]
    for cell, corpus in zip(cells[3:], ("tinystories", "builtin"), strict=True):
        row = _profile(model, corpus)
        assert cell.startswith(_cell(row)), (model, corpus, cell, _cell(row))
        assert str(row.n_layers) == cells[2]
        if row.p_two_sided < 0.05:
            assert cell.endswith(f"p = {row.p_two_sided:.3f}"), (cell, row.p_two_sided)


def _pooled(corpus: str):
    p = pd.read_csv(RESULTS / "pooled.csv")
    rows = p[(p.corpus == corpus) & (p.statistic == "align_mlp_mid")]
    assert len(rows) == 1
    return rows.iloc[0]


def test_the_pooled_test_and_its_power():
    tiny, pydoc = _pooled("tinystories"), _pooled("builtin")
    assert (f"{signed(tiny.weighted_mean_rho)}, p = {tiny.p_rises_weighted:.2f} on TinyStories; "
            f"{signed(pydoc.weighted_mean_rho)}, p = {pydoc.p_rises_weighted:.3f} on pydoc") in TEXT
    power3, power5 = tiny["power_at_rho_0.3"], tiny["power_at_rho_0.5"]
    assert f"power {power3:.2f} to detect ρ = 0.3 and {power5:.2f} for 0.5" in TEXT
    assert f"p {tiny.p_rises_weighted:.2f}; power {power3:.2f} for a common ρ of 0.3" in README


def test_the_quantization_bounds():
    q = pd.read_csv(RESULTS / "quantization.csv").groupby("quant").abs_delta.max()
    assert (f"**{q['Q8_0']:.3f} (Q8_0), {q['Q4_1']:.3f} (Q4_1) and {q['Q4_K_M']:.3f} (Q4_K_M)**") in TEXT
    assert f"4-bit weights move the statistic by at most {max(q['Q4_1'], q['Q4_K_M']):.3f}" in README


def test_where_quantization_changed_the_depth_trend():
    """Every (model, quantization, reading) whose ρ changed is named on the page, with both values."""
    q = pd.read_csv(RESULTS / "quantization.csv").drop_duplicates(["model", "corpus", "quant", "statistic"])
    changed = q[q.rho_full.round(6) != q.rho_quant.round(6)]
    assert set(changed.quant) <= {"Q4_K_M"} and "never changed under Q8_0 or Q4_1" in TEXT
    assert f"changed in {len(changed)} of {len(q[q.quant == 'Q4_K_M'])} Q4_K_M readings" in TEXT
    for row in changed.itertuples():
        assert f"{signed(row.rho_full)} → {signed(row.rho_quant)}" in TEXT, row


def test_the_readme_names_the_rising_models_rho():
    gemma = _profile("gemma3-270m", "tinystories")
    assert f"ρ {signed(gemma.rho)}" in README
