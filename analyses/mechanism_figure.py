"""Figure: MLP-residual alignment against relative depth, one colour per real pretrained model, one panel
per reading; solid lines on the TinyStories sample, dashed on builtin:pydoc; bars are 95% CIs over
sequences (mostly narrower than the markers).

    python -m analyses.mechanism_figure    # -> results/mechanism/real_models_alignment_vs_depth.png
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analyses.mechanism_pooled import CORPORA, MODELS, READINGS, RESULTS, reading  # noqa: E402

OUT = RESULTS / "real_models_alignment_vs_depth.png"
LINES = {"tinystories": "-", "builtin": "--"}
LABELS = {"smollm2": "SmolLM2-135M (Q4_1, 30 L)", "gemma3-270m": "Gemma 3 270M (Q4_K_M, 18 L)",
          "minilm": "all-MiniLM-L6-v2 (fp32, 6 L)", "stories260k": "stories260K (fp32, 5 L)",
          "babyllama": "BabyLlama (fp32, 5 L)", "llama2xs": "llama2xs (fp32, 5 L)"}


def draw(ax, stat: str) -> None:
    colours = plt.get_cmap("tab10").colors
    for colour, model in zip(colours, MODELS, strict=False):
        for corpus in CORPORA:
            if not (RESULTS / model / corpus / "results.csv").is_file():
                continue
            v = reading(model, corpus, stat)
            ax.errorbar(v.depth, v.value, yerr=[v.value - v.ci_low, v.ci_high - v.value], color=colour,
                        linestyle=LINES[corpus], marker="o", markersize=3, capsize=0, linewidth=1.2,
                        label=LABELS[model] if corpus == "tinystories" else None)
    ax.axhline(0, color="grey", linewidth=0.6)
    ax.set_title(stat)
    ax.set_xlabel("relative depth l/(L-1)")


def main() -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2), sharex=True)
    for ax, stat in zip(axes, READINGS, strict=True):
        draw(ax, stat)
    axes[0].set_ylabel("mean cos(MLP out, residual stream)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8, frameon=False,
               title="solid: TinyStories sample; dashed: builtin:pydoc", title_fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(OUT, dpi=110)
    print(OUT)


if __name__ == "__main__":
    main()
