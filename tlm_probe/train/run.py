"""Everything a run checks and prepares before its first step, so that bad input fails with one line and
leaves nothing behind: data and tokenizer, model config, vocabulary and context checks, output folder."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tlm_probe.data.stream import BatchOrder, TokenData, eval_windows, load_token_data
from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import CONFIG, atomic_write_text
from tlm_probe.train import checkpoint
from tlm_probe.train.config import FILE, TrainConfig, config_differences


@dataclass
class RunPlan:
    tc: TrainConfig
    out: Path
    data: TokenData
    cfg: TLMConfig
    resume: bool
    """True when there is a checkpoint to continue from."""


def plan_run(
    tc: TrainConfig,
    out: str | Path,
    *,
    data: TokenData | None = None,
    resume: bool = False,
    overwrite: bool = False,
) -> RunPlan:
    out = Path(out)
    data = data if data is not None else load_token_data(tc.data, tc.tokenizer)
    cfg = tc.model_config(data.vocab_size)
    check_compatible(tc, cfg, data)
    has_state = resume and bool(checkpoint.step_folders(out))
    if resume and not has_state and _has_files(out):
        raise UserError(f"{out} has no checkpoint to resume from; pass --overwrite to start it over")
    if has_state:
        check_resume(out, tc, cfg)
    else:
        check_output(out, overwrite or (resume and not _has_files(out)))
    return RunPlan(tc, out, data, cfg, has_state)


def check_compatible(tc: TrainConfig, cfg: TLMConfig, data: TokenData) -> None:
    if data.tokenizer is not None and data.tokenizer.vocab_size != cfg.vocab_size:
        raise UserError(
            f"tokenizer {data.tokenizer.name!r} has {data.tokenizer.vocab_size} ids but the model's "
            f"vocab_size is {cfg.vocab_size}"
        )
    if data.tokenizer is None and data.vocab_size > cfg.vocab_size:
        raise UserError(
            f"{data.source} holds token id {data.vocab_size - 1}, outside the model's vocab_size "
            f"{cfg.vocab_size}"
        )
    if tc.seq_len > cfg.max_seq_len:
        raise UserError(f"seq_len {tc.seq_len} is above the model's context max_seq_len={cfg.max_seq_len}")
    BatchOrder(data.train, tc.seq_len, tc.seed)  # each raises a UserError when its split is too short
    eval_windows(data.val, tc.seq_len, tc.eval_tokens)


def _has_files(out: Path) -> bool:
    return out.is_dir() and any(out.iterdir())


def check_output(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"output {out} exists and is not a folder")
    if _has_files(out) and not overwrite:
        raise UserError(f"output folder {out} already exists; pass --overwrite to replace it or --resume")
    if _has_files(out):
        check_replaceable(out, (FILE, "metrics.jsonl"), "a training run")
    ensure_writable(out)


def check_replaceable(out: Path, markers: tuple[str, ...], what: str) -> None:
    """--overwrite deletes a folder only if this tool wrote it (so `--out . --overwrite` cannot wipe a
    project): it must hold one of the marker files."""
    if _has_files(out) and not any((out / m).exists() for m in markers):
        raise UserError(f"refusing to overwrite {out}: it is not {what} folder (no {' or '.join(markers)})")


def ensure_writable(out: Path) -> None:
    """Raise a UserError unless `out` could be created: probe the nearest existing ancestor by actually
    making (and removing) a folder there, since permission bits say nothing when running as root."""
    parent = next((p for p in [out, *out.parents] if p.exists()), Path("."))
    if not parent.is_dir():
        raise UserError(f"output folder {out} cannot be created: {parent} is a file")
    try:
        probe = Path(tempfile.mkdtemp(dir=parent, prefix=".tlm-write-test-"))
        probe.rmdir()
    except OSError as e:
        raise UserError(f"output folder {out} cannot be written ({e.strerror}: {parent})") from None


def check_resume(out: Path, tc: TrainConfig, cfg: TLMConfig) -> None:
    saved = json.loads((out / FILE).read_text()) if (out / FILE).is_file() else None
    if saved is None:
        raise UserError(f"{out} has checkpoints but no {FILE}; cannot check that the config matches")
    diffs = config_differences(saved, tc)
    if diffs:
        raise UserError(f"cannot resume {out} with a different config ({'; '.join(diffs)})")
    if (out / CONFIG).is_file():
        old = json.loads((out / CONFIG).read_text())
        if list(old.get("d_ff", [])) != list(cfg.d_ff):
            raise UserError(
                f"cannot resume {out}: its MLP widths {old.get('d_ff')} differ from {list(cfg.d_ff)}"
            )


def prepare_folder(plan: RunPlan, overwrite: bool) -> None:
    """Create the run folder (rank 0 only): train_config.json, data info and tokenizer files."""
    out = plan.out
    if plan.resume:
        return
    if overwrite and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / FILE, json.dumps(plan.tc.to_dict(), indent=2) + "\n")
    atomic_write_text(out / "data.json", json.dumps(_data_info(plan.data), indent=2, default=str) + "\n")
    if plan.data.tokenizer is not None:
        plan.data.tokenizer.save(out)


def _data_info(data: TokenData) -> dict:
    return {
        "source": data.source,
        "train_tokens": int(len(data.train)),
        "val_tokens": int(len(data.val)),
        "vocab_size": data.vocab_size,
        **data.info,
    }
