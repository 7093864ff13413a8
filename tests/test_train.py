"""The trainer: overfitting, evaluation against a direct computation, exact resume, Ctrl-C, batch order."""

import json
import math
import os
import signal

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tlm_probe.data.stream import TokenData, eval_windows
from tlm_probe.models.io import load_tlm
from tlm_probe.results import read_metrics
from tlm_probe.tokenizer import ByteTokenizer
from tlm_probe.train.config import TrainConfig
from tlm_probe.train.loop import Trainer
from tlm_probe.train.optim import lr_at
from tlm_probe.train.run import plan_run

TINY = dict(d_model=32, n_layers=2, n_heads=2, d_ff=64, seq_len=16, batch_size=4, eval_tokens=256,
            eval_interval=5, log_interval=1, warmup=2, lr=1e-2, progress=False, threads=1)


def byte_data(n_train=4000, n_val=600, seed=0) -> TokenData:
    rng = np.random.default_rng(seed)
    text = rng.integers(97, 123, size=n_train + n_val).astype(np.uint32)  # letters a-z
    return TokenData(text[:n_train], text[n_train:], ByteTokenizer(), "synthetic", 256)


def train(tmp_path, name, data=None, stop_at=None, resume=False, **kw):
    tc = TrainConfig(**{**TINY, **kw})
    plan = plan_run(tc, tmp_path / name, data=data or byte_data(), resume=resume)
    return Trainer(plan, stop_at=stop_at).run()


def losses(run, kind="train", key="train_loss"):
    return [(m["step"], m[key]) for m in read_metrics(run) if m["kind"] == kind]


def test_overfits_one_batch(tmp_path):
    window = np.arange(17, dtype=np.uint32) * 7 % 251  # one window: every batch repeats it
    data = TokenData(window, window, ByteTokenizer(), "one-batch", 256)
    train(tmp_path, "fit", data=data, steps=40, warmup=5, eval_interval=40, weight_decay=0.0, batch_size=1,
          lr=2e-2)
    curve = losses(tmp_path / "fit")
    assert curve[0][1] > 4.0  # ~ln(256) at initialisation
    assert curve[-1][1] < 0.05


def test_eval_loss_equals_direct_computation(tmp_path):
    data = byte_data()
    summary = train(tmp_path, "ev", data=data, steps=6, peak_flops=1e9)
    from tlm_probe.models.accounting import train_flops_per_token

    for rec in (m for m in read_metrics(tmp_path / "ev") if m["kind"] == "train"):  # MFU from the accounting
        flops = train_flops_per_token(load_tlm(tmp_path / "ev").cfg, 16)
        assert rec["mfu"] == pytest.approx(rec["tokens_per_s"] * flops / 1e9)
    model = load_tlm(tmp_path / "ev")
    windows = eval_windows(data.val, 16, 256)
    # independent path: log-softmax and gather over the saved model, one window at a time, in float64
    total, count = 0.0, 0
    with torch.no_grad():
        for w in windows:
            logp = torch.log_softmax(model(w[None, :-1]).double(), -1)[0]
            total -= logp.gather(-1, w[1:, None]).sum().item()
            count += len(w) - 1
    assert count == 256
    assert summary["val_loss"] == pytest.approx(total / count, rel=1e-6)
    assert summary["val_ppl"] == pytest.approx(math.exp(total / count), rel=1e-6)
    assert summary["val_bpb"] == pytest.approx(total / count / math.log(2), rel=1e-6)  # 1 byte per token


def test_lr_schedule_warmup_then_cosine():
    tc = TrainConfig(lr=1.0, warmup=10, min_lr_ratio=0.1, steps=110)
    assert lr_at(0, tc, 110) == pytest.approx(0.1)
    assert lr_at(9, tc, 110) == pytest.approx(1.0)
    assert lr_at(60, tc, 110) == pytest.approx(0.55)  # half-way down the cosine
    assert lr_at(110, tc, 110) == pytest.approx(0.1)


def _weights(run):
    return load_file(str(run / "model.safetensors"))


def test_resume_is_bit_identical(tmp_path):
    kw = dict(steps=8, ckpt_interval=3, keep_last=2, dropout=0.1, grad_accum=2, batch_size=2)  # dropout: RNG
    train(tmp_path, "full", **kw)
    part = train(tmp_path, "split", stop_at=5, **kw)
    assert part["interrupted"] and part["step"] == 5
    assert not (tmp_path / "split" / "run.json").exists()
    train(tmp_path, "split", resume=True, **kw)
    assert losses(tmp_path / "full") == losses(tmp_path / "split")
    assert losses(tmp_path / "full", "eval", "val_loss") == losses(tmp_path / "split", "eval", "val_loss")
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "split")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    kept = sorted(p.name for p in (tmp_path / "split" / "state").iterdir())
    assert kept == ["step_0000006", "step_0000008"]  # keep_last=2


def test_ctrl_c_saves_and_resumes(tmp_path):
    data = byte_data()
    tc = TrainConfig(**{**TINY, "steps": 10})
    trainer = Trainer(plan_run(tc, tmp_path / "int", data=data))

    def press_ctrl_c(progress):
        if progress.step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    summary = trainer.run(press_ctrl_c)
    assert summary["interrupted"] and summary["stopped_by_signal"] and summary["step"] == 3
    assert (tmp_path / "int" / "state" / "step_0000003").is_dir()
    crashed = tmp_path / "int" / "state" / ".tmp-step_dead"  # a checkpoint write that died half-way
    crashed.mkdir()
    (crashed / "model.safetensors").write_bytes(b"\x00" * 10)
    train(tmp_path, "int", data=data, resume=True, steps=10)
    train(tmp_path, "ref", data=data, steps=10)
    assert losses(tmp_path / "int") == losses(tmp_path / "ref")
    assert not crashed.exists()  # cleaned up by the next successful save


def test_arms_with_different_widths_get_identical_batches(tmp_path):
    seen = {}
    for arm in ("uniform", "cosine:1.5:0.5"):
        opts = {**TINY, "steps": 3, "schedule": arm, "n_layers": 4, "d_ff": 128, "eval_tokens": 16}
        tc = TrainConfig(**opts)
        trainer = Trainer(plan_run(tc, tmp_path / arm.replace(":", "_"), data=byte_data()))
        batches = seen[arm] = []
        trainer.raw.embed.register_forward_pre_hook(
            lambda mod, args, b=batches: b.append(args[0].clone()) if mod.training else None)
        trainer.run()
        assert len(batches) == 3
    assert not torch.equal(seen["uniform"][0], seen["uniform"][1])  # the batches do move through the data
    assert all(torch.equal(a, b) for a, b in zip(seen["uniform"], seen["cosine:1.5:0.5"], strict=True))
    widths = json.loads((tmp_path / "cosine_1.5_0.5" / "config.json").read_text())["d_ff"]
    assert widths != [128] * 4 and sum(widths) == 512
