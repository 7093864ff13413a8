"""What goes into `tlm report`: sections of figures and tables built from probe results, comparisons and
runs. Rendering (HTML, Markdown, files) is report.html's job; drawing is the plotting modules' job."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from tlm_probe.plotting.colours import distinct_colours
from tlm_probe.plotting.curves import band_note, plot_curves
from tlm_probe.plotting.depth import plot_depth
from tlm_probe.plotting.depth_panels import plot_depth_panels
from tlm_probe.plotting.heatmaps import plot_heatmaps
from tlm_probe.plotting.importance import default_proxies, plot_importance
from tlm_probe.plotting.inputs import (
    Comparison,
    input_kind,
    lacking_notes,
    load_comparison,
    load_eval,
    load_probe,
    load_run,
    merge_probes,
    split_note,
)
from tlm_probe.plotting.paired import plot_paired
from tlm_probe.report.diff_section import diff_section
from tlm_probe.report.html import Document, FigureBlock, Section, Table, Text
from tlm_probe.report.options import ReportOptions
from tlm_probe.report.summary import comparison_summary, eval_headline
from tlm_probe.report.trust_section import trust_section
from tlm_probe.results import ProbeResult
from tlm_probe.stats.paired import has_interval, paired_by_seed

# depth figures come in this order; statistics not listed follow in the order the table has them
DEPTH_FIRST = (
    "align_mlp_mid",
    "align_mlp_pre",
    "align_abs_mlp_mid",
    "align_abs_mlp_pre",
    "align_mlp_post",
    "align_attn_pre",
    "norm_ratio_mlp",
    "resid_norm_growth",
    "block_influence",
    "mlp_influence",
    "attn_influence",
)
MAX_DEPTH_STATS = 16
PANELS_PER_FIGURE = 6
SAFE = re.compile(r"[^A-Za-z0-9_-]+")


def build_document(paths: Sequence[str | Path], options: ReportOptions | None = None, **fields) -> Document:
    """The report page of `paths` that `options` asks for (or ReportOptions(**fields)); its figures are
    drawn later, by html.render_figures."""
    if options is None:
        options = ReportOptions(**fields)
    elif fields:
        raise TypeError(f"give ReportOptions or its fields, not both: {', '.join(fields)}")
    title, size, dpi = options.title, options.pixels, options.dpi
    kinds = [(Path(p), input_kind(p)) for p in paths]
    loaders = {"compare": load_comparison, "run": load_run}
    trained = [(n, k, loaders[k](p)) for n, (p, k) in enumerate(kinds) if k in loaders]
    # probe folders inside a comparison (tlm demo) join the probes given directly
    probe_paths = [p for p, k in kinds if k == "probe"] + [q for _, _, c in trained for q in c.probes]
    # a folder given itself and again inside a comparison (or spelt two ways) is one probe: collapsed
    unique: dict[Path, Path] = {}
    for p in probe_paths:
        unique.setdefault(Path(p).resolve(), p)
    probes = [load_probe(p) for p in unique.values()]
    # one colour per model on the whole page, no two alike (plotting.colours.distinct_colours); the names
    # as the figures show them (merge_probes names a model that two probes hold after their folders)
    probed = merge_probes(probes)[0]["model"].astype(str) if probes else []
    colours = distinct_colours([*probed, *(m for _, _, c in trained if not c.curves.empty
                                           for m in c.curves["arm"].astype(str))])
    sections: list[Section] = probe_sections(probes, size, dpi, colours) if probes else []
    sections += [training_section(comp, k, n, size, dpi, colours) for n, k, comp in trained]
    sections += [diff_section(p, n, size, dpi) for n, (p, k) in enumerate(kinds) if k == "diff"]
    sections += [trust_section(p, n, size, dpi) for n, (p, k) in enumerate(kinds) if k == "trust"]
    summary = comparison_summary([c for _, k, c in trained if k == "compare"])
    summary += headline_figure(sections)
    evals = [load_eval(p) for p, k in kinds if k == "eval"]
    if evals:
        table = pd.concat(evals, ignore_index=True)
        sections.append(eval_section(table))
        summary.append(eval_headline(table))
    provenance = [Text(f"inputs: {', '.join(str(p) for p, _ in kinds)}")]
    provenance += [Table(f"provenance of {pr.path}", provenance_table(pr.provenance)) for pr in probes]
    provenance += [Table(f"provenance of {c.path}", provenance_table(c.info.get("provenance") or {}))
                   for _, k, c in trained if k == "compare"]
    return Document(title, sections, summary=summary, provenance=provenance)


def headline_figure(sections: list[Section]) -> list:
    """The first depth figure (alignment against depth, when the probe measured it) moves to the summary;
    its section keeps a pointer, so the page draws it once."""
    depth = next((s for s in sections if s.title == "Statistics vs depth"), None)
    blocks = depth.blocks if depth else []
    first = next((k for k, b in enumerate(blocks) if isinstance(b, FigureBlock)), None)
    if first is None:
        return []
    block = depth.blocks[first]
    depth.blocks[first] = Text(f"{block.caption}: shown in the Summary")
    return [block]


def _ordered_stats(results: pd.DataFrame) -> list[str]:
    """Statistics with per-layer rows, contract ones first."""
    present = list(dict.fromkeys(results.loc[results["layer"] >= 0, "statistic"].astype(str)))
    return [s for s in DEPTH_FIRST if s in present] + [s for s in present if s not in DEPTH_FIRST]


def _name(prefix: str, k: int, stat: str) -> str:
    return f"{prefix}-{k:02d}-{SAFE.sub('_', stat)[:40]}"


def probe_sections(probes: list[ProbeResult], size, dpi, colours: dict | None = None) -> list[Section]:
    """The probe results' sections; `colours` (arm -> colour) the page's, else distinct among these models."""
    results, matrices = merge_probes(probes)
    colours = colours or distinct_colours(results["model"])
    stats = _ordered_stats(results)
    overview = Section("Probe results", [Table("probed models (provenance: at the end)",
                                               probe_overview(results))])
    depth = Section("Statistics vs depth", depth_blocks(results, stats[:MAX_DEPTH_STATS], size, dpi, colours))
    if len(stats) > MAX_DEPTH_STATS:
        depth.blocks.append(Text(f"{len(stats) - MAX_DEPTH_STATS} more statistics are in the tables below"))
    sections = [overview, depth]
    importance = default_proxies(results)
    if importance:
        sections.append(
            Section(
                "Layer importance",
                [
                    FigureBlock(
                        "importance",
                        f"importance proxies per layer: {', '.join(importance)}",
                        lambda: plot_importance(results, importance, size=size, dpi=dpi, colours=colours),
                        notes=[n for p in importance for n in lacking_notes(results, results["model"], p)]
                        + split_note(results),
                    )
                ],
            )
        )
    if matrices is not None:
        sections.append(matrix_section(matrices, results, size, dpi))
    tables = Section(
        "Tables",
        [
            Table(f"{m}: value per layer and statistic", wide_table(results, m))
            for m in dict.fromkeys(results["model"])
        ],
    )
    agreement = [p.agreement for p in probes if p.agreement is not None and not p.agreement.empty]
    if agreement:
        columns = ["model", "statistic", "value", "ci_low", "ci_high", "n_layers", "target"]
        caption = "Spearman agreement of each proxy with the ablation effect across layers (agreement.csv)"
        tables.blocks.insert(0, Table(caption, pd.concat(agreement)[columns]))
    return [*sections, tables]


def depth_blocks(results: pd.DataFrame, stats: list[str], size, dpi, colours: dict) -> list[FigureBlock]:
    """The first statistic at full size (the Summary's headline), the others as small multiples of up to
    PANELS_PER_FIGURE panels each: 15 full-size figures of one line chart each read as a wall."""
    def notes(chunk):
        return [n for s in chunk for n in lacking_notes(results, results["model"], s)] + split_note(results)

    head, rest = stats[:1], stats[1:]
    blocks = [FigureBlock(_name("depth", 0, s), f"{s} against normalised depth, one line per model",
                          lambda s=s: plot_depth(results, s, size=size, dpi=dpi, colours=colours),
                          notes=notes([s])) for s in head]
    for k in range(0, len(rest), PANELS_PER_FIGURE):
        chunk = rest[k:k + PANELS_PER_FIGURE]
        blocks.append(FigureBlock(
            _name("depth", 1 + k // PANELS_PER_FIGURE, "panels"),
            f"{', '.join(chunk)} against normalised depth, one panel each, one line per model",
            lambda c=chunk: plot_depth_panels(results, c, size=size, dpi=dpi, colours=colours),
            notes=notes(chunk)))
    return blocks


def is_full_matrix(rows: pd.DataFrame) -> bool:
    """Every model has all n×n cells (a heatmap); sparse tables such as drop_block_best are shown as rows."""
    for _, one in rows.groupby("model"):
        n = int(max(one["layer_i"].max(), one["layer_j"].max())) + 1
        if len(one) != n * n:
            return False
    return True


def matrix_section(matrices: pd.DataFrame, results: pd.DataFrame, size, dpi) -> Section:
    tokens = results.groupby("model")["n_tokens"].max().to_dict()
    blocks = []
    for k, stat in enumerate(dict.fromkeys(matrices["statistic"].astype(str))):
        rows = matrices[matrices["statistic"] == stat]
        if is_full_matrix(rows):
            blocks.append(
                FigureBlock(
                    _name("matrix", k, stat),
                    f"{stat} between every pair of layers",
                    lambda s=stat: plot_heatmaps(matrices, s, size=size, dpi=dpi, tokens=tokens),
                    notes=lacking_notes(matrices, tokens, stat, "matrices"),
                )
            )
        else:
            blocks.append(Table(f"{stat} (rows: layer_i, layer_j, value)", rows.reset_index(drop=True)))
    return Section("Layer × layer", blocks)


def wide_table(results: pd.DataFrame, model: str) -> pd.DataFrame:
    """layer, depth, d_ff, then one column per statistic (its value) for one model."""
    one = results[(results["model"] == model) & (results["layer"] >= 0)]
    wide = one.pivot_table(
        index=["layer", "depth", "d_ff"], columns="statistic", values="value", aggfunc="first", sort=False
    )
    return wide[[s for s in _ordered_stats(one) if s in wide.columns]].reset_index()


def probe_overview(results: pd.DataFrame) -> pd.DataFrame:
    """One row per probed model: its layers and the tokens its statistics averaged over."""
    per_layer = results[results["layer"] >= 0]
    g = per_layer.groupby("model", sort=False)
    out = pd.DataFrame({"layers": g["layer"].nunique(), "statistics": g["statistic"].nunique(),
                        "n_tokens": g["n_tokens"].max()})
    if "split" in per_layer:
        out["data split"] = g["split"].first()
    return out.reset_index()


PROVENANCE_CHARS = 4000


def _compact(value) -> str:
    """Nested values as compact JSON; a very long one is cut with a visible mark, never silently."""
    text = json.dumps(value, default=str)
    if len(text) <= PROVENANCE_CHARS:
        return text
    return text[:PROVENANCE_CHARS] + f" … (cut; {len(text):,} characters in all)"


def provenance_table(provenance: dict) -> pd.DataFrame:
    """key/value rows; nested values shown as compact JSON (the folded table wraps them)."""
    rows = [(k, v if isinstance(v, (str, int, float, bool)) or v is None else _compact(v))
            for k, v in provenance.items()]
    return pd.DataFrame(rows or [("provenance", "none recorded")], columns=["field", "value"])


def eval_section(table: pd.DataFrame) -> Section:
    """`tlm eval` results: one row per task and metric, one column per model."""
    wide = table.pivot_table(index=["task", "metric"], columns="model", values="value", sort=False)
    return Section(
        "Evaluation",
        [
            Table("task × metric, one column per model (tlm eval)", wide.reset_index()),
            Table("every row with its standard error and document count", table),
        ],
    )


def training_section(comp: Comparison, kind: str, n: int, size, dpi, colours: dict | None = None) -> Section:
    label = {"compare": "Comparison", "run": "Training run"}[kind]
    section = Section(f"{label}: {comp.path.name}", [Text(f"folder: {comp.path}")])
    captions = {
        "summary": "per arm: mean and std over seeds",
        "paired": "each arm against uniform, paired over seeds",
        "results": "per arm and seed",
    }
    for name, frame in comp.tables.items():
        section.blocks.append(Table(captions[name], frame))
        if name == "paired":  # its picture beside it
            section.blocks += paired_blocks(comp, n, size, dpi, colours)
    if not comp.curves.empty:
        caption = f"loss against tokens seen ({band_note(comp.curves)})"
        section.blocks.append(
            FigureBlock(
                _name("curves", n, comp.path.name),
                caption,
                lambda: plot_curves(comp.curves, size=size, dpi=dpi, colours=colours),
            )
        )
    return section


def paired_blocks(comp: Comparison, n: int, size, dpi, colours: dict | None = None) -> list[FigureBlock]:
    """A comparison's paired validation-loss differences, seed by seed, once an arm has two pairs (one pair
    has no interval)."""
    paired, results = comp.tables.get("paired"), comp.tables.get("results")
    if results is None or not has_interval(paired, "val_loss"):
        return []
    diffs, summary = paired_by_seed(results, paired, "val_loss")
    caption = "validation loss, each arm minus its baseline of the same seed: seeds, mean and 95% interval"
    return [FigureBlock(_name("paired", n, comp.path.name), caption,
                        lambda: plot_paired(diffs, summary, "val_loss", size=size, dpi=dpi, colours=colours))]
