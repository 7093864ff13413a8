"""The report's "Diff" section of a `tlm diff` folder: its figure (`tlm plot DIFF`) and short tables of the
numbers diff.json holds (KL, ΔNLL, the mean CKA diagonal, B's best match for each layer of A, and the
--stats differences when asked). Numbers are copied from the folder, never recomputed: the one derived
value is the mean of the CKA diagonal (each layer of A with the layer of B the diff paired it with)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tlm_probe.plotting.diff import plot_diff
from tlm_probe.plotting.inputs import load_diff
from tlm_probe.report.html import FigureBlock, Section, Table, Text


def paired_layers(summary: dict) -> list[int]:
    """B's layer paired with each layer of A (the drift's pairing: the same layer, or the same relative
    depth when the depths differ)."""
    return summary.get("drift_layers_b") or list(range(len(summary["cka"])))


def cka_diagonal(summary: dict) -> list[float | None]:
    """CKA of each layer of A with its paired layer of B."""
    return [row[j] if j < len(row) else None
            for row, j in zip(summary["cka"], paired_layers(summary), strict=True)]


def _interval(m) -> str:
    if not isinstance(m, dict) or m.get("ci_low") is None:
        return ""
    return f"[{m['ci_low']:+.4g}, {m['ci_high']:+.4g}]"


def headline(summary: dict) -> pd.DataFrame:
    diag = [v for v in cka_diagonal(summary) if v is not None]
    row = {"model A": summary["model_a"], "model B": summary["model_b"], "tokens": summary["n_tokens"],
           "kl_mean (A‖B)": summary["kl_mean"], "dnll_mean (A − B)": summary["dnll_mean"],
           "mean CKA diagonal": float(np.mean(diag)) if diag else None}
    if summary.get("seeds"):  # `tlm diff CMP --arm`: means over seeds, with their 95% t intervals
        row |= {"seeds": ", ".join(map(str, summary["seeds"])), "kl 95% CI": _interval(summary.get("kl")),
                "dnll 95% CI": _interval(summary.get("dnll"))}
    return pd.DataFrame([row])


def per_layer_table(summary: dict) -> pd.DataFrame:
    columns = zip(summary["cka"], summary["best_match"], paired_layers(summary), cka_diagonal(summary),
                  summary["drift"], strict=True)
    rows = []
    for l, (row, best, j, diag, drift) in enumerate(columns):
        rows.append({"layer of A": l, "paired layer of B": j, "CKA with it": diag, "best match in B": best,
                     "CKA with the best match": None if best is None else row[best], "drift": drift})
    return pd.DataFrame(rows)


def stats_table(summary: dict) -> pd.DataFrame:
    columns = ["statistic", "layer", "value_a", "value_b", "diff", "ci_low", "ci_high", "n"]
    return pd.DataFrame(summary["stats"])[columns]


def diff_section(path: Path, k: int, size, dpi) -> Section:
    """One diff folder: the figure and the tables; `k` numbers its figure's file."""
    s, t = load_diff(path)
    names = (str(s["model_a"]), str(s["model_b"]))
    pairing = s.get("drift_pairing", "layer")
    seeds = f", means over seeds {', '.join(map(str, s['seeds']))}" if s.get("seeds") else ""
    section = Section(f"Diff: {names[0]} vs {names[1]}", [
        Text(f"folder: {path}; {int(s['n_tokens']):,} tokens of {s.get('options', {}).get('data')}"
             f"{seeds}; A's layers paired with B's by {pairing}"),
        FigureBlock(f"diff-{k:02d}", f"tlm diff: linear CKA (A's layers against B's), drift and best CKA "
                    f"against depth, KL and ΔNLL by target frequency: {names[0]} vs {names[1]}",
                    lambda: plot_diff(t["cka.csv"], t["layers.csv"], t["tokens.csv"], names=names,
                                      pairing=pairing, n_tokens=int(s["n_tokens"]), size=size, dpi=dpi)),
        Table("KL(A‖B) and ΔNLL = NLL_A − NLL_B in nats per prediction; the mean CKA of each layer of A "
              "with its paired layer of B", headline(s)),
        Table("per layer of A: linear CKA (residual stream) with its paired layer and with B's best match, "
              "and the drift ‖h_A − h_B‖/‖h_B‖", per_layer_table(s)),
    ])
    if s.get("stats"):
        section.blocks.append(Table(f"probe statistics A − B per layer of A ({s.get('stats_ci', '')})",
                                    stats_table(s)))
    return section
