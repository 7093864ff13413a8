"""One look for every figure: seaborn whitegrid, colour-blind-safe palette, sizes in pixels, atomic saves.

Figures are built on `matplotlib.figure.Figure` directly (no pyplot) so that drawing never touches global
state: the CLI, tests and notebooks can make hundreds of figures without a GUI backend or leaked figures.
"""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

import matplotlib as mpl
import seaborn as sns
from cycler import cycler
from matplotlib.figure import Figure

from tlm_probe.errors import UserError
from tlm_probe.files.fileio import atomic_path
from tlm_probe.plotting.options import DEFAULT_DPI, DEFAULT_SIZE, check_dpi, check_size
from tlm_probe.statistic_names import STATISTICS

PALETTE = "colorblind"
FORMATS = ("png", "pdf", "svg")
TITLE_WIDTH = 80  # characters per title line

# Readable names with units for the alignment and training statistics (an importance statistic's is on its
# row); unknown statistics fall back to their own name.
STAT_LABELS: dict[str, str] = {
    "align_mlp_mid": "cos(MLP out, resid_mid)",
    "align_mlp_pre": "cos(MLP out, resid_pre)",
    "align_abs_mlp_mid": "|cos(MLP out, resid_mid)|",
    "align_abs_mlp_pre": "|cos(MLP out, resid_pre)|",
    "align_mlp_post": "cos(MLP out, resid_post)",
    "align_attn_pre": "cos(attn out, resid_pre)",
    "norm_ratio_mlp": "‖MLP out‖ / ‖resid_mid‖ (ratio)",
    "block_influence": "1 − cos(resid_pre, resid_post)",
    "mlp_influence": "1 − cos(resid_mid, resid_post)",
    "attn_influence": "1 − cos(resid_pre, resid_mid)",
    "resid_norm_growth": "‖resid_post‖ / ‖resid_pre‖ (ratio)",
    "attn_entropy": "attention entropy, mean over heads (nats)",
    "val_loss": "validation loss (nats/token)",
    "test_nll": "test NLL (nats/token)",
    "train_loss": "training loss (nats/token)",
    "val_ppl": "validation perplexity",
    "val_bpb": "validation bits per byte",
}


def stat_label(statistic: str) -> str:
    """Its readable name: STAT_LABELS, or its importance row's label (statistic_names.STATISTICS)."""
    row = STATISTICS.get(statistic) if statistic in STATISTICS else None
    return STAT_LABELS.get(statistic) or (row and row.label) or statistic


def axis_label(statistic: str) -> str:
    """'align_mlp_mid: cos(MLP output, residual it adds to)'; a statistic of the user's, its name alone."""
    label = stat_label(statistic)
    return statistic if label == statistic else f"{statistic}: {label}"


def legend_label(name: str) -> str:
    """Matplotlib hides labels that start with '_'; a leading space keeps such a model in the legend."""
    return f" {name}" if name.startswith("_") else name


def palette(n: int) -> list:
    """`n` colours from the colour-blind palette (it cycles after 10)."""
    base = sns.color_palette(PALETTE)
    return [base[i % len(base)] for i in range(max(n, 1))]


def _rc() -> dict:
    rc = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook", font_scale=0.9)}
    rc["axes.prop_cycle"] = cycler(color=palette(10))
    rc["text.parse_math"] = False  # model names come from data: a '$' in one must not start mathtext
    rc["svg.fonttype"] = "none"  # keep SVG text as text (searchable, small)
    rc["pdf.fonttype"] = 42
    return rc


@contextlib.contextmanager
def figure_style() -> Iterator[None]:
    """The house style, scoped: nothing leaks into the caller's matplotlib settings."""
    with mpl.rc_context(_rc()):
        yield


def new_figure(size: Sequence[int] = DEFAULT_SIZE, dpi: int = DEFAULT_DPI) -> Figure:
    """A figure of exactly `size` pixels when saved at `dpi` (no tight bbox, which would change it)."""
    width, height = check_size(size)
    check_dpi(dpi)
    return Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")


def figure_format(path: str | Path) -> str:
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise UserError(f"cannot save {str(path)!r}: the file must end in one of .{', .'.join(FORMATS)}")
    return fmt


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Save as PNG, PDF or SVG (by suffix) through a temporary file + rename: never a half-written file."""
    path = Path(path)
    fmt = figure_format(path)
    if not path.parent.is_dir():
        raise UserError(f"output folder does not exist: {path.parent}")
    with atomic_path(path) as tmp, figure_style():
        fig.savefig(tmp, format=fmt, dpi=fig.dpi, metadata=_metadata(fmt))
    return path


def _metadata(fmt: str) -> dict | None:
    # a fixed creator and no date keep regenerated figures byte-stable in git
    return {"png": {"Software": "tlm_probe"}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]


def split_suffix(rows) -> str:
    """', data split val' (or ', MIXED data splits all, val') from a table's `split` column, if any."""
    if "split" not in getattr(rows, "columns", ()):
        return ""
    splits = sorted(set(rows["split"].dropna().astype(str)))
    if not splits:
        return ""
    return f", data split {splits[0]}" if len(splits) == 1 else f", MIXED data splits {', '.join(splits)}"


def title_with_provenance(what: str, models: Sequence[str], tokens: Sequence[float]) -> str:
    """'<what> — model (N tokens); ...': every figure says which model and how much data made it."""
    parts = []
    for model, n in zip(models, tokens, strict=True):
        parts.append(f"{model} ({int(n):,} tokens)" if n == n and n > 0 else str(model))
    shown = "; ".join(parts[:4]) + (f"; +{len(parts) - 4} more" if len(parts) > 4 else "")
    # long model lists wrap instead of running off the figure (titles are centred and unclipped)
    return f"{what}\n{textwrap.fill(shown, TITLE_WIDTH)}" if shown else what
