"""Issue 23's study, the `components` part of analyses/study.py: which parameter-bearing component to taper.

At the allocation study's scale and seeds (9 layers, d_model 64, 800 steps; analyses/allocation.py) with
grouped-query attention (4 query heads, 2 key/value heads: a key/value taper needs KV heads that divide
a layer's query heads), cosine 1.5 -> 0.5 applied to: the MLP width, the query heads (one GQA group per
unit, so KV heads follow), the key/value heads alone, and MLP + query heads together, each paired with
uniform. compare checks that every arm has the uniform arm's parameters, FLOPs and KV-cache bytes per
token, and writes kv_bytes_per_token into results.csv. Re-running continues where it stopped.
"""

from __future__ import annotations

from pathlib import Path

from analyses.allocation import scaled

SEEDS = "0,1,2"
TAPER = "cosine:1.5:0.5"
ARMS = ("uniform", f"mlp={TAPER}", f"heads={TAPER}", f"kv={TAPER}", f"mlp={TAPER}+heads={TAPER}")


def run(opts, flags: list[str], tlm) -> None:
    tlm("compare", "--schedules", ",".join(ARMS), "--seeds", SEEDS, "--kv-heads", "2",
        "--out", str(opts.root / "components"), *scaled(flags), "--json")


def shapes_table(folder: Path) -> str:
    """Markdown: each arm's per-layer MLP widths, query heads and KV heads (seed 0's run; every seed of an
    arm has the same shape), its parameters and KV-cache bytes per token, from compare's results.csv."""
    import pandas as pd

    runs = pd.read_csv(folder / "results.csv").drop_duplicates("arm").set_index("arm")
    lines = ["| arm | MLP widths | query heads | KV heads | parameters | KV bytes / token |",
             "|---|---|---|---|---|---|"]
    for arm, r in runs.iterrows():
        cells = [arm, r.d_ff, r.heads, r.kv_heads, f"{int(r.params):,}", f"{int(r.kv_bytes_per_token):,}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def collect(dst: Path) -> list[str]:
    """The Markdown lines study.collect adds under the components part."""
    return ["### components: the arms' shapes (equal parameters, FLOPs and KV bytes, checked by compare)", "",
            shapes_table(dst), ""]
