"""The mechanism numbers reported for the real pretrained models (analyses/results/mechanism/real_models.md,
profiles.csv, pooled.csv, quantization.csv) recomputed here from the per-model results.csv files with
numpy and math alone; and the Q4_K / Q6_K packing of analyses/kquants.py read back by gguf's dequantizer."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent / "analyses" / "results" / "mechanism"
MODELS = ("smollm2", "gemma3-270m", "minilm", "stories260k", "babyllama", "llama2xs")
READINGS = ("align_mlp_pre", "align_mlp_mid", "align_mlp_post")
LABEL = {"smollm2": "SmolLM2-135M-Instruct", "gemma3-270m": "Gemma 3 270M", "minilm": "all-MiniLM-L6-v2",
         "stories260k": "stories260K", "babyllama": "BabyLlama (tok105)", "llama2xs": "llama2xs"}


def ranks(v: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), 1-based."""
    order = np.argsort(v, kind="stable")
    r = np.empty(len(v))
    r[order] = np.arange(1, len(v) + 1)
    for x in np.unique(v):
        r[v == x] = r[v == x].mean()
    return r


def spearman(v: np.ndarray) -> float:
    a, b = np.arange(len(v)) - (len(v) - 1) / 2, ranks(v) - (len(v) + 1) / 2
    return float(a @ b / math.sqrt((a @ a) * (b @ b)))


def table(model: str, corpus: str, stat: str) -> pd.DataFrame:
    folder = ROOT / model if model in MODELS else ROOT / "quantization_study" / model  # two trained here
    df = pd.read_csv(folder / corpus / "results.csv")
    return df[df.statistic == stat].sort_values("layer")


def ci(rho: float, n: int) -> tuple[float, float]:
    c = max(-0.99, min(0.99, rho))
    half = 1.959963984540054 * math.sqrt((1 + c * c / 2) / (n - 3))
    return math.tanh(math.atanh(c) - half), math.tanh(math.atanh(c) + half)


def rows_of(md: str, *cells: str) -> list[str]:
    return [line for line in md.splitlines() if all(f"| {c} |" in line for c in cells)]


@pytest.fixture(scope="module")
def md() -> str:
    return (ROOT / "real_models.md").read_text()


def test_profiles_recomputed(md):
    profiles = pd.read_csv(ROOT / "profiles.csv")
    assert set(profiles.model) == set(MODELS)
    for _, p in profiles.iterrows():
        v = table(p.model, p.corpus, p.statistic).value.to_numpy()
        rho = spearman(v)
        assert p.n_layers == len(v) and abs(p.rho - rho) < 1e-12
        if len(v) <= 8:  # the exact two-sided p over every layer order
            null = [spearman(np.asarray(perm, float)) for perm in itertools.permutations(ranks(v))]
            assert abs(p.p_two_sided - np.mean(np.abs(null) >= abs(rho) - 1e-12)) < 1e-12
        lo, hi = ci(rho, len(v))
        assert abs(p.ci_low - lo) < 1e-12 and abs(p.ci_high - hi) < 1e-12
        [row] = rows_of(md, LABEL[p.model], p.corpus)
        assert f"{rho:+.2f} [{lo:+.2f}, {hi:+.2f}]" in row


def test_pooled_recomputed(md):
    pooled = pd.read_csv(ROOT / "pooled.csv")
    assert len(pooled) == 6  # two corpora x three readings, every one over all six models
    for _, p in pooled.iterrows():
        rhos = np.array([spearman(table(m, p.corpus, p.statistic).value.to_numpy()) for m in MODELS])
        ns = np.array([len(table(m, p.corpus, p.statistic)) for m in MODELS])
        weighted = float((ns - 1) @ rhos / (ns - 1).sum())
        assert abs(p.weighted_mean_rho - weighted) < 1e-12 and abs(p.mean_rho - rhos.mean()) < 1e-12
        assert p.layers == ns.sum() and 0 < p.p_rises_weighted <= 1 and 0 < p.p_rises_equal <= 1
        [row] = rows_of(md, p.corpus, p.statistic)
        assert f"| {weighted:+.2f} |" in row
        for r in (0.3, 0.5, 0.7):  # one-sided z test at 0.05 on a mean with null variance 1/sum(n - 1)
            power = 0.5 * math.erfc(-(r * math.sqrt((ns - 1).sum()) - 1.6448536269514722) / math.sqrt(2))
            assert abs(p[f"power_at_rho_{r}"] - power) < 1e-9 and f"| {power:.2f} |" in row


def test_quantization_table_recomputed(md):
    quant = pd.read_csv(ROOT / "quantization.csv")
    assert set(quant.quant) == {"Q8_0", "Q4_1", "Q4_K_M"}
    quantized = {"stories260k", "babyllama", "llama2xs", "minilm", "study-uniform", "study-cosine"}
    assert quantized <= set(quant.model)
    for (model, corpus, mix, stat), g in quant.groupby(["model", "corpus", "quant", "statistic"]):
        full = table(model, corpus, stat)  # the committed full-precision reading, same tokens
        assert np.allclose(g.sort_values("layer").value_full, full.value, rtol=0, atol=1e-12)
        assert (g.n_tokens.to_numpy() == full.n_tokens.to_numpy()).all()
        assert np.allclose(g.abs_delta, (g.value_quant - g.value_full).abs(), atol=1e-15)
        assert abs(g.rho_quant.iloc[0] - spearman(g.sort_values("layer").value_quant.to_numpy())) < 1e-12
        if stat == "align_mlp_mid":
            [row] = rows_of(md, LABEL.get(model, model), mix)
            assert f"{g.rho_full.iloc[0]:+.2f} → {g.rho_quant.iloc[0]:+.2f}" in row
    for mix, g in quant.groupby("quant"):
        bound = f"{mix}: |Δ| ≤ {g.abs_delta.max():.3f}, |Δρ| ≤ {(g.rho_quant - g.rho_full).abs().max():.2f}"
        assert bound in md


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K"])
def test_kquant_packing_read_back_by_gguf(kind):
    from gguf import GGMLQuantizationType as Q

    from analyses.kquants import roundtrip

    rng = np.random.default_rng(1)
    ramp = np.sort(rng.standard_normal((2, 512)).astype(np.float32), axis=1)
    back = roundtrip(ramp, Q[kind])
    group = 32 if kind == "Q4_K" else 16  # one scale per group: values in a group keep their order
    for g in back.reshape(-1, group):
        assert (np.diff(g) >= 0).all()  # a swapped nibble, half or scale would break the order
    levels = 15 if kind == "Q4_K" else 62
    for x, y in zip(ramp.reshape(-1, group), back.reshape(-1, group), strict=True):
        spread = max(x.max(), 0) - min(x.min(), 0)
        # half a step, plus the 6-bit (Q4_K) or int8 (Q6_K) rounding of the group's scale and offset
        assert np.abs(x - y).max() <= spread / levels * (0.5 + 0.1) + 0.02 * np.abs(ramp).max()


def test_fallbacks_follow_llama_cpp():
    from gguf import GGMLQuantizationType as Q

    from analyses.kquants import settle, use_more_bits

    assert settle(Q.Q4_K, 512) == Q.Q4_K and settle(Q.Q4_K, 384) == Q.Q5_0 and settle(Q.Q6_K, 64) == Q.Q8_0
    assert settle(Q.Q4_1, 172) == Q.F16
    assert [use_more_bits(i, 16) for i in range(16)][:6] == [True, True, False, False, True, False]
