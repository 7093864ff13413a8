"""Everything a run checks and prepares before its first step, so that bad input fails with one line and
leaves nothing behind: data and tokenizer, model config, vocabulary and context checks, output folder."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from tlm_probe.data.stream import BatchOrder, TokenData, eval_windows, load_token_data
from tlm_probe.errors import UserError
from tlm_probe.files.fileio import (
    atomic_write_text,
    check_kind,
    foreign,
    read_manifest,
    record,
    remove_owned,
    replace_entry,
    temp_folder,
)
from tlm_probe.files.folder_lock import folder_lock
from tlm_probe.files.jsonfile import read_json_object
from tlm_probe.files.out_folder import check_apart, claim
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.device import check_device
from tlm_probe.models.io import CONFIG, WEIGHTS_FILE
from tlm_probe.models.remote_code import CODE_FILE
from tlm_probe.results import METRICS_FILE, metrics_lines
from tlm_probe.train import checkpoint
from tlm_probe.train.config import TRAIN_CONFIG_FILE, TrainConfig, config_differences


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
    check_device(tc.device)
    check_apart(out, [tc.data] if isinstance(tc.data, (str, Path)) else [])
    check_kind(out, "train")  # also for --resume: never continue inside another command's folder
    data = data if data is not None else load_token_data(tc.data, tc.tokenizer)
    cfg = tc.model_config(data.vocab_size)
    check_compatible(tc, cfg, data)
    has_state = resume and bool(checkpoint.step_folders(out))
    if resume and not has_state and _has_files(out):
        raise UserError(f"{out} has no checkpoint to resume from; pass --overwrite to start it over")
    if has_state:
        check_resume(out, tc, cfg)
    else:
        _check_output(out, overwrite or (resume and not _has_files(out)))
    return RunPlan(tc, out, data, cfg, has_state)


def writer_lock(out: Path):
    """The folder lock of `out` on the process that writes it (rank 0 under torchrun), for the whole run."""
    return folder_lock(out) if int(os.environ.get("RANK", "0")) == 0 else contextlib.nullcontext()


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
    check_memory(tc, cfg)
    BatchOrder(data.train, tc.seq_len, tc.seed)  # each raises a UserError when its split is too short
    eval_windows(data.val, tc.seq_len, tc.eval_tokens, tc.eval_sample)


def check_memory(tc: TrainConfig, cfg: TLMConfig) -> None:
    """Refuse, before anything is written, a CPU run that cannot fit in this machine's memory (a vocabulary
    of 10**9 or a 2M-entry tokenizer.json otherwise failed in the allocator after the run folder was
    begun). A lower bound: 16 bytes per parameter (float32 weights and gradients, AdamW's two moments) and
    three float32 copies of one micro-batch's logits (logits, log-softmax, their gradient)."""
    from tlm_probe.models.accounting import count_params
    from tlm_probe.models.device import resolve_device

    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that reports it: no check
        return
    if resolve_device(tc.device).type != "cpu":
        return
    params = count_params(cfg).total
    need = 16 * params + 3 * 4 * tc.batch_size * tc.seq_len * cfg.vocab_size
    if need > ram:
        raise UserError(
            f"this run needs at least {need / 2**30:,.1f} GiB of memory ({params:,} parameters at vocab_size "
            f"{cfg.vocab_size:,}, logits of {tc.batch_size}x{tc.seq_len} tokens), more than this machine's "
            f"{ram / 2**30:,.1f} GiB"
        )


def _has_files(out: Path) -> bool:
    return out.is_dir() and any(out.iterdir())


# every top-level name a run may write (tokenizer files included): --overwrite refuses to write onto one
# of these if tlm did not write it
RUN_FILES = (TRAIN_CONFIG_FILE, "data.json", METRICS_FILE, CONFIG, WEIGHTS_FILE, "run.json",
             checkpoint.STATE_DIR, CODE_FILE, "tlm_tokenizer.json", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "vocab.json", "merges.txt")


def _check_output(out: Path, overwrite: bool) -> None:
    claim(out, overwrite=overwrite, writes=RUN_FILES, hint=" or --resume to continue it", kind="train")


SPLIT_OF_THE_BATCH = frozenset({"batch_size", "grad_accum"})
"""How the global batch is split over processes and micro-steps: free to change on a resume (another world
size) as long as the global batch is the one the run trained with (the batch order depends on it alone)."""


def _same_global_batch(out: Path, tc: TrainConfig) -> frozenset[str]:
    """SPLIT_OF_THE_BATCH when this launch's global batch (batch x accum x WORLD_SIZE) equals the one the
    newest checkpoint was trained with (its tokens per step), else nothing."""
    step, tokens, _ = checkpoint.read_step_info(checkpoint.step_folders(out)[-1])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    same = step > 0 and tokens == step * tc.batch_size * tc.grad_accum * world * tc.seq_len
    return SPLIT_OF_THE_BATCH if same else frozenset()


def check_resume(out: Path, tc: TrainConfig, cfg: TLMConfig) -> None:
    """Everything a resume reads, checked before it writes: the saved config matches, and the newest
    checkpoint (state.json, weights) and metrics.jsonl are sound; each fault is one line naming the file."""
    if not (out / TRAIN_CONFIG_FILE).is_file():
        raise UserError(f"{out} has checkpoints but no {TRAIN_CONFIG_FILE}; cannot check that the config "
                        "matches")
    saved = read_json_object(out / TRAIN_CONFIG_FILE)
    diffs = config_differences(saved, tc, free=_same_global_batch(out, tc))
    if diffs:
        raise UserError(f"cannot resume {out} with a different config ({'; '.join(diffs)})")
    if (out / CONFIG).is_file():
        old = read_json_object(out / CONFIG)
        if not isinstance(old.get("d_ff", []), list) or list(old.get("d_ff", [])) != list(cfg.d_ff):
            raise UserError(
                f"cannot resume {out}: its MLP widths {old.get('d_ff')} differ from {list(cfg.d_ff)}"
            )
    checkpoint.check_state(out, cfg)
    metrics_lines(out / METRICS_FILE)  # raises on a bad line; a torn last line is dropped on resume


def prepare_folder(plan: RunPlan, overwrite: bool) -> None:
    """Create the run folder (rank 0 only): train_config.json, data info and tokenizer files. With
    --overwrite only the files of the earlier run (its manifest) are removed first."""
    out = plan.out
    if plan.resume:
        _own_code_file(out)
        return
    if overwrite and out.exists():
        remove_owned(out)
    record(out, RUN_FILES[:8], "train")
    atomic_write_text(out / TRAIN_CONFIG_FILE, json.dumps(plan.tc.to_dict(), indent=2) + "\n")
    atomic_write_text(out / "data.json", json.dumps(_data_info(plan.data), indent=2, default=str) + "\n")
    if plan.data.tokenizer is not None:
        with temp_folder(out / "tokenizer") as tmp:
            plan.data.tokenizer.save(tmp)
            names = sorted(p.name for p in tmp.iterdir())
            clash = sorted(set(names) & set(foreign(out)))
            if clash:
                raise UserError(f"refusing to replace {out / clash[0]}: tlm did not write it")
            record(out, names, "train")
            for name in names:
                replace_entry(tmp / name, out / name)


def _own_code_file(out: Path) -> None:
    """A run resumed from before save_tlm wrote modeling_tlm.py gains it: recorded in its manifest (where it
    has one) before it is written, and refused where someone else put a file of that name."""
    if not read_manifest(out):  # a run from before manifests: nothing is recorded in it
        return
    if CODE_FILE in foreign(out):
        raise UserError(f"refusing to replace {out / CODE_FILE}: tlm did not write it")
    record(out, [CODE_FILE], "train")


def _data_info(data: TokenData) -> dict:
    return {
        "source": data.source,
        "train_tokens": int(len(data.train)),
        "val_tokens": int(len(data.val)),
        "vocab_size": data.vocab_size,
        **data.info,
    }
