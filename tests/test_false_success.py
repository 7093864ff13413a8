"""Bad input that was reported as success (issue 18): each case now fails with one line `error: ...`, exit
code 1, nothing written; and the two refusals that were wrong (token-id perplexity without a tokenizer,
tlm schedule --multiple-of on the uniform side) now succeed with numbers checked independently."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app

runner = CliRunner()
# a tiny run without TINY's --steps, so that a test can choose them
ARCH = TINY[:TINY.index("--steps")] + TINY[TINY.index("--steps") + 2 :]


def _fails(args, *absent: Path, needle: str = "", after_progress: bool = False) -> str:
    """exit 1 with one line `error: ...` (after_progress: a training progress bar may precede it)."""
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    lines = r.stderr.strip().splitlines()
    err = lines[-1] if after_progress else r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in r.output, err
    assert all(not line.startswith("error") for line in lines[:-1]), lines
    assert needle in err, err
    for path in absent:
        assert not path.exists(), f"{path} was written"
    return err


def _ok(args) -> str:
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, (r.exit_code, r.output, r.exception)
    return r.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("false-success")
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    (root / "corpus.txt").write_text(text)
    np.save(root / "ids.npy", np.random.default_rng(0).integers(0, 50, 4000).astype(np.uint32))
    return root


@pytest.fixture(scope="module")
def byte_ck(work) -> Path:
    """A 2-step byte-level checkpoint (vocabulary 256, with its tokenizer)."""
    _ok(["train", "--data", work / "corpus.txt", "--out", work / "byte-ck", *TINY])
    return work / "byte-ck"


@pytest.fixture(scope="module")
def ids_ck(work) -> Path:
    """A 2-step checkpoint trained on bare token ids: it has no tokenizer."""
    _ok(["train", "--data", work / "ids.npy", "--out", work / "ids-ck", *TINY])
    assert not (work / "ids-ck" / "tlm_tokenizer.json").exists()
    return work / "ids-ck"


# ---- training ------------------------------------------------------------------------------------------
def test_exploding_finite_loss_is_divergence(work, tmp_path):
    """lr 10 (from YAML; the top of its range): the loss explodes to ~1e3 nats while staying finite; it
    ended with exit 0. The limit is 4 x max(start loss, ln 256 = 5.55) = ~22 nats, over 3 steps in a row."""
    (tmp_path / "lr10.yaml").write_text("lr: 10\nwarmup: 0\n")
    out = tmp_path / "run"
    args = ["train", "--config", tmp_path / "lr10.yaml", "--data", work / "corpus.txt", "--out", out,
            *ARCH, "--steps", "30", "--ckpt-interval", "1", "--log-interval", "1"]
    err = _fails(args, needle="training diverged at step", after_progress=True)
    assert "above 4 x max(start" in err and "try a lower --lr (now 10)" in err
    losses = [r["train_loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
              if r.get("kind") == "train"]
    limit = 4 * max(losses[0], math.log(256))
    assert max(losses) > 10 * limit  # it did explode; the run stopped within 3 steps of crossing
    assert len(losses) < 30
    # every checkpoint on disk is finite and from a step whose loss was below the limit
    from safetensors.torch import load_file

    steps = sorted(int(p.name.split("_")[-1]) for p in (out / "state").glob("step_*"))
    assert steps, "the first steps were below the limit and checkpointed"
    for step in steps:
        assert losses[step - 1] <= limit
    for path in (out / "state").rglob("*.safetensors"):
        assert all(torch.isfinite(t).all() for t in load_file(path).values())


def test_loss_guard_window_and_resume_state():
    from tlm_probe.train.explosion import FACTOR, WINDOW, LossGuard

    g = LossGuard(256)
    limit = FACTOR * math.log(256)
    assert g.check(5.0) is None and g.limit == pytest.approx(limit)  # start 5.0 < ln 256
    assert g.check(limit * 10) is None and g.rising  # one spike: not yet
    assert g.check(1.0) is None and not g.rising  # it recovered: the count starts again
    for _ in range(WINDOW - 1):
        assert g.check(limit * 2) is None
    resumed = LossGuard(256)
    resumed.load_state_dict(g.state_dict())  # a resumed run continues the count
    assert "for 3 steps" in resumed.check(limit * 2)


@pytest.mark.parametrize("stop_at", ["0", "-5"])
def test_stop_at_below_one_is_refused(work, tmp_path, stop_at):
    out = tmp_path / "run"
    _fails(["train", "--data", work / "corpus.txt", "--out", out, *TINY, "--stop-at", stop_at], out,
           needle=f"--stop-at must be an integer in [1, 1000000000], got {stop_at}")


def test_stop_at_not_after_the_resumed_step_is_refused(work, tmp_path):
    out = tmp_path / "run"
    _ok(["train", "--data", work / "corpus.txt", "--out", out, *ARCH, "--steps", "4", "--stop-at", "2"])
    _fails(["train", "--data", work / "corpus.txt", "--out", out, *ARCH, "--steps", "4", "--resume",
            "--stop-at", "2"], needle="--stop-at 2 is not after step 2")


@pytest.mark.parametrize("command", ["compare", "demo"])
def test_one_seed_twice_is_refused(work, tmp_path, command):
    out = tmp_path / "cmp"
    extra = ["--data", work / "corpus.txt", *TINY] if command == "compare" else ["--quick"]
    _fails([command, "--seeds", "0,00", "--out", out, *extra], out, needle="--seeds lists a seed twice")


# ---- generate / eval -----------------------------------------------------------------------------------
@pytest.mark.parametrize("t", ["nan", "inf"])
def test_generate_non_finite_temperature(byte_ck, t):
    _fails(["generate", byte_ck, "--prompt", "the ", "--temperature", t], needle="--temperature must be")


def test_eval_negative_ppl_tokens(byte_ck, work, tmp_path):
    out = tmp_path / "ev"
    _fails(["eval", byte_ck, "--ppl-data", work / "corpus.txt", "--ppl-tokens", "-5", "--out", out], out,
           needle="--ppl-tokens must be an integer in [0, ")  # its stated range (ranges.py)


def test_eval_ids_outside_a_byte_models_vocabulary(byte_ck, tmp_path):
    np.save(tmp_path / "big.npy", np.arange(0, 600, dtype=np.uint32) % 300)  # ids 256..299: no byte
    out = tmp_path / "ev"
    _fails(["eval", byte_ck, "--ppl-data", tmp_path / "big.npy", "--ppl-tokens", "0", "--out", out], out,
           needle="token id 299, outside the model's vocabulary (ids 0..255)")


def _direct_nll(ck: Path, ids: np.ndarray, L: int) -> tuple[float, int]:
    """Mean next-token NLL over disjoint windows of L targets, computed here from the model's logits."""
    from tlm_probe.models.io import load_tlm

    model = load_tlm(ck).eval()
    starts = list(range(0, len(ids) - L, L))
    x = torch.from_numpy(np.stack([ids[s : s + L + 1] for s in starts]).astype(np.int64))
    with torch.no_grad():
        logits = model(x[:, :-1]).double()
    nll = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="sum")
    return float(nll) / x[:, 1:].numel(), x[:, 1:].numel()


def _token_nll(out: Path) -> tuple[float, int]:
    import pandas as pd

    t = pd.read_csv(out / "results.csv")
    row = t[t.metric == "token_nll"].iloc[0]
    return float(row.value), int(row.n)


def test_eval_ppl_split_all_scores_train_and_val(ids_ck, work, tmp_path):
    """--ppl-split all scored only the train part of a token file: now all ids, in file order."""
    _ok(["eval", ids_ck, "--ppl-data", work / "ids.npy", "--ppl-split", "all", "--ppl-tokens", "0",
         "--ppl-context", "16", "--out", tmp_path / "all"])
    value, n = _token_nll(tmp_path / "all")
    ref, n_ref = _direct_nll(ids_ck, np.load(work / "ids.npy").astype(np.int64), 16)
    assert n == n_ref == (len(range(0, 4000 - 16, 16))) * 16
    # float32 logits, NLL summed in float64 over ~4000 tokens of ~ln 50 each: 8 eps32 x ln V
    assert value == pytest.approx(ref, abs=8 * 1.2e-7 * math.log(50))


def test_token_id_perplexity_needs_no_tokenizer(ids_ck, work, tmp_path):
    """It was refused "this model has no tokenizer"; ids need none (and give no bits per byte)."""
    import pandas as pd

    _ok(["eval", ids_ck, "--ppl-data", work / "ids.npy", "--ppl-tokens", "0", "--ppl-context", "16",
         "--out", tmp_path / "ev"])
    metrics = set(pd.read_csv(tmp_path / "ev" / "results.csv").metric)
    assert metrics == {"token_nll", "token_ppl"}  # bits per byte need the bytes of each id
    value, n = _token_nll(tmp_path / "ev")
    val = np.load(work / "ids.npy").astype(np.int64)[-200:]  # the bare file's last 5% is its val split
    ref, n_ref = _direct_nll(ids_ck, val, 16)
    assert n == n_ref and value == pytest.approx(ref, abs=8 * 1.2e-7 * math.log(50))
    # task text still needs a tokenizer: one line
    _fails(["eval", ids_ck, "--tasks", "pydoc-mc", "--out", tmp_path / "ev2"], tmp_path / "ev2",
           needle="has no tokenizer")


def test_compare_eval_tasks_on_token_ids_refused_before_writing(work, tmp_path):
    out = tmp_path / "cmp"
    _fails(["compare", "--data", work / "ids.npy", "--schedules", "uniform", "--seeds", "0",
            "--eval-tasks", "pydoc-mc", "--out", out, *TINY], out, needle="--eval-tasks needs a tokenizer")


# ---- probe / demo ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["model.safetensors", "."])
def test_probe_refuses_weights_as_data(byte_ck, tmp_path, what):
    out = tmp_path / "pr"
    _fails(["probe", byte_ck, "--data", byte_ck / what, "--out", out], out, needle="not text or token ids")


def test_demo_negative_threads(tmp_path):
    out = tmp_path / "demo"
    _fails(["demo", "--quick", "--threads", "-1", "--out", out], out,
           needle="--threads must be an integer in [0, 4096]")


def test_demo_threads_reach_training_and_probing(tmp_path, monkeypatch):
    """--threads 1 was never passed on: training and probing ran on all cores."""
    import tlm_probe.probe.engine as probe_module  # the demo probes through run_probe (imported on use)
    import tlm_probe.train.loop as loop

    seen = []
    real_probe, real_loop = probe_module.run_probe, loop.Trainer._loop

    def probe(*a, **k):
        seen.append(("probe", torch.get_num_threads()))
        return real_probe(*a, **k)

    def _loop(self, report):
        seen.append(("train", torch.get_num_threads()))
        return real_loop(self, report)

    monkeypatch.setattr(probe_module, "run_probe", probe)
    monkeypatch.setattr(loop.Trainer, "_loop", _loop)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # so that "all cores" and 1 differ on any machine
    try:
        _ok(["demo", "--quick", "--steps", "2", "--threads", "1", "--out", tmp_path / "demo"])
    finally:
        torch.set_num_threads(before)
    assert {k for k, _ in seen} == {"probe", "train"} and all(n == 1 for _, n in seen), seen
    run = json.loads((tmp_path / "demo" / "runs" / "uniform-s0" / "train_config.json").read_text())
    assert run["threads"] == 1


# ---- schedule --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--schedule", "cosine:1.5:0.5:3:4:5"], "'cosine' takes at most 2 number(s) (start:end)"),
        (["--schedule", "uniform", "--start", "1.5", "--end", "0.5"], "uniform does not use --start, --end"),
        (["--preset", "tlm-440m", "--d-ff", "1000"], "--preset tlm-440m sets the architecture; drop --d-ff"),
    ],
)
def test_schedule_refuses_what_it_would_ignore(args, needle):
    _fails(["schedule", *args], needle=needle)


def test_schedule_multiple_of_applies_to_the_uniform_side():
    """Regression: the uniform side rounded to 64 and refused d_ff=1000 (not a multiple of 64)."""
    r = json.loads(_ok(["schedule", "--layers", "7", "--d-ff", "1000", "--multiple-of", "8", "--d-model",
                        "64", "--schedule", "cosine", "--json"]))
    widths = r["widths"]
    assert sum(widths) == 7 * 1000 == r["uniform_total"] and all(w % 8 == 0 for w in widths)
    assert widths == sorted(widths, reverse=True) and r["parity"]
    # independent parameter count: SwiGLU MLPs are 3·d·d_l, so equal Σ d_l means equal MLP parameters
    assert r["mlp_params"] == r["uniform_mlp_params"] == 3 * 64 * 7000
