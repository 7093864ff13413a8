"""DiffOptions: what shapes a diff of two models (light: the CLI builds `tlm diff`'s options from it)."""

from __future__ import annotations

from dataclasses import dataclass

from tlm_probe.capture.option_fields import Dtype, Split, shared
from tlm_probe.errors import UserError
from tlm_probe.ranges import check_values
from tlm_probe.statistic_names import ALIGNMENT, asked_statistics


@dataclass(frozen=True, kw_only=True)
class DiffOptions:
    """Everything that shapes `tlm diff` besides the two models (recorded in diff.json)."""

    data: str = shared("data")
    split: Split = shared("split")
    seq_len: int = 0
    """Tokens per sequence (0: 256, or the shorter context of the two models)."""
    max_tokens: int = shared("max_tokens", 16_384)
    batch_size: int = shared("batch_size")
    exclude_bos: bool = False
    """Leave position 0 out of every mean."""
    stats: str = ""
    """Probe statistics (names as in `tlm probe --stats`: alignment statistics or the alignment set), comma
    separated, whose per-layer difference A - B is written with a 95% CI (stats.csv); empty: none."""
    device: str = shared("device")
    dtype: Dtype = shared("dtype")

    def __post_init__(self) -> None:
        check_values(self)
        if self.seq_len == 1:
            raise UserError("--seq-len 1 leaves no next token to predict: give 0 (automatic) or at least 2")
        diff_statistics(self.stats)  # a typo is refused at start-up, before a model is loaded


def diff_statistics(spec: str) -> tuple[str, ...]:
    """--stats -> the statistics to diff (none for ""); the importance statistics are refused (one line): they
    come from a second pass over kept sequences, not from the per-token stream that pairs A and B."""
    if not spec.strip():
        return ()
    asked = asked_statistics(spec)
    other = [s for s in asked if s not in ALIGNMENT]
    if other:
        more = " ..." if len(other) > 3 else ""
        raise UserError(f"tlm diff --stats takes the per-token alignment statistics ({', '.join(ALIGNMENT)});"
                        f" {', '.join(other[:3])}{more} are importance statistics: probe each model with "
                        "`tlm probe --stats` for those")
    return asked


def check_models(model_a: str, model_b: str) -> None:
    """What can be known of the pair before loading either (issue 49): each is there (or a hub name the
    loader may find), and where both are folders, their config.json declare the same vocabulary size."""
    from pathlib import Path

    from tlm_probe.capture.model_source import check_model_source
    from tlm_probe.models.config_file import read_config_json

    check_model_source(model_a, "MODEL_A")
    check_model_source(model_b, "MODEL_B")
    a, b = Path(model_a), Path(model_b)
    if (a.resolve() == b.resolve()) if a.exists() else model_a == model_b:
        raise UserError(f"MODEL_A and MODEL_B are the same model ({model_a}): its diff with itself is zero "
                        "everywhere; give two models (a copy of one folder, to check tlm diff itself)")
    sizes = []
    for m in (model_a, model_b):
        folder = Path(m)
        raw = read_config_json(folder) if (folder / "config.json").is_file() else {}
        vocab = raw.get("vocab_size", (raw.get("text_config") or {}).get("vocab_size"))
        sizes.append(vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None)
    if None not in sizes and sizes[0] != sizes[1]:
        raise UserError(f"the models read different vocabularies ({sizes[0]} vs {sizes[1]} ids, their "
                        "config.json): tlm diff compares next-token predictions over one vocabulary")
