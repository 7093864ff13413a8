"""tlm eval: harness scores against a direct computation of the same log-likelihoods; perplexity against
the trainer's validation loss; CLI input errors."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer

LIMIT = 12


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A random byte-level tlm checkpoint whose context (512) holds every built-in task item whole."""
    torch.manual_seed(0)
    model = TaperedLM(TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(96, 32), max_seq_len=512))
    with torch.no_grad():  # sharper next-token distributions than the 0.02 init, so choices differ
        for p in model.parameters():
            p.mul_(8.0) if p.dim() > 1 else None
    folder = tmp_path_factory.mktemp("eval") / "tiny"
    save_tlm(model, folder)
    ByteTokenizer().save(folder)
    return folder, model.eval()


@pytest.fixture(scope="module")
def evaluated(tiny_run):
    from tlm_probe.eval.run import EvalOptions, run_eval

    folder, _ = tiny_run
    return run_eval(str(folder), EvalOptions(tasks=["pydoc-mc", "pydoc-lastword"], limit=LIMIT, batch_size=5))


def _direct_ll(model, context: str, continuation: str) -> tuple[float, bool]:
    """log p(continuation | context) summed over its bytes, from one unpadded forward of the whole text."""
    ctx = list(context.encode())
    full = ctx + list(continuation.encode())
    with torch.no_grad():
        logp = F.log_softmax(model(torch.tensor([full[:-1]]))[0].double(), -1)
    targets = torch.tensor(full[len(ctx) :])
    rows = logp[len(ctx) - 1 :]
    return float(rows.gather(-1, targets[:, None]).sum()), bool((rows.argmax(-1) == targets).all())


def _value(table, task, metric):
    return float(table[(table["task"] == task) & (table["metric"] == metric)]["value"].iloc[0])


def test_multiple_choice_equals_direct_choose_by_logprob(tiny_run, evaluated):
    _, model = tiny_run
    samples = evaluated.samples["pydoc-mc"]
    assert len(samples) == LIMIT
    acc, acc_norm = [], []
    for s in samples:
        doc = s["doc"]
        lls = np.array([_direct_ll(model, doc["context"], " " + c)[0] for c in doc["choices"]])
        harness = np.array([r[0][0] for r in s["resps"]])
        np.testing.assert_allclose(harness, lls, rtol=1e-4, atol=1e-3)
        acc.append(int(np.argmax(lls) == doc["label"]))
        lengths = np.array([len(c) for c in doc["choices"]])  # the harness: characters of the choice
        acc_norm.append(int(np.argmax(lls / lengths) == doc["label"]))
    assert len(set(acc)) == 2 or len(set(acc_norm)) == 2, "a degenerate model: every answer alike"
    assert _value(evaluated.table, "pydoc-mc", "acc") == pytest.approx(np.mean(acc))
    assert _value(evaluated.table, "pydoc-mc", "acc_norm") == pytest.approx(np.mean(acc_norm))


def test_lastword_equals_direct_greedy_and_perplexity(tiny_run, evaluated):
    _, model = tiny_run
    direct = [_direct_ll(model, s["doc"]["context"], " " + s["doc"]["target"]) for s in evaluated.samples[
        "pydoc-lastword"]]
    lls = np.array([d[0] for d in direct])
    assert _value(evaluated.table, "pydoc-lastword", "acc") == pytest.approx(np.mean([d[1] for d in direct]))
    assert _value(evaluated.table, "pydoc-lastword", "perplexity") == pytest.approx(
        math.exp(-lls.mean()), rel=1e-4
    )
    n = evaluated.table.groupby("task")["n"].first()
    assert n["pydoc-lastword"] == n["pydoc-mc"] == LIMIT


def test_provenance_names_lm_eval_and_task_hashes(evaluated):
    prov = evaluated.provenance
    assert prov["versions"]["lm_eval"].startswith("0.4.")
    assert {t["task"] for t in prov["tasks"]} == {"pydoc-mc", "pydoc-lastword"}
    assert all(len(t["data_sha256"]) == 64 and t["split"] == "val" for t in prov["tasks"])


def test_long_continuation_is_scored_in_rolling_windows(tiny_run):
    """A context + continuation longer than the model's context: chunks of targets, each with all the
    text that fits before it, equal a direct computation window by window."""
    from tlm_probe.capture.loading import wrap_model
    from tlm_probe.eval.scorer import Scorer, TextCodec

    _, model = tiny_run
    scorer = Scorer(wrap_model(model, ByteTokenizer()), TextCodec(ByteTokenizer()), max_length=16)
    ctx, cont = list(range(65, 75)), list(range(97, 97 + 30))
    full = ctx + cont
    expected = 0.0
    for t in range(len(ctx), len(full)):  # target t, conditioned on the window the rule gives it
        end = len(full) - ((len(full) - 1 - t) // 16) * 16
        inp = full[max(0, end - 1 - 16) : end - 1]
        with torch.no_grad():
            logp = F.log_softmax(model(torch.tensor([inp]))[0].double(), -1)
        expected += float(logp[len(inp) - (end - t), full[t]])
    assert scorer.loglikelihoods([(ctx, cont)])[0][0] == pytest.approx(expected, rel=1e-5)


def test_perplexity_equals_trainer_validation_loss(tiny_run):
    from tlm_probe.capture.loading import wrap_model
    from tlm_probe.data.stream import eval_windows, load_token_data, target_bytes
    from tlm_probe.eval.perplexity import perplexity, source_ids
    from tlm_probe.eval.scorer import Scorer, TextCodec
    from tlm_probe.train.evaluate import evaluate

    _, model = tiny_run
    seq_len, tokens = 64, 1024
    data = load_token_data("builtin:pydoc", "byte")  # the trainer's validation ids
    windows = eval_windows(data.val, seq_len, tokens)
    n_bytes = target_bytes(windows, data.tokenizer)
    trainer = evaluate(model, windows, n_bytes, 4, "cpu", contextlib.nullcontext)

    scorer = Scorer(wrap_model(model, ByteTokenizer()), TextCodec(ByteTokenizer()), batch_size=3)
    ids = source_ids("builtin:pydoc", "val", scorer.codec)
    np.testing.assert_array_equal(ids, np.asarray(data.val, dtype=np.int64))
    res = perplexity(scorer, ids, source="builtin:pydoc", split="val", context=seq_len, max_tokens=tokens)
    assert res.n_tokens == trainer["val_tokens"] == tokens
    assert res.loss == pytest.approx(trainer["val_loss"], rel=1e-6)
    rows = {r["metric"]: r["value"] for r in res.rows("m")}
    assert rows["bits_per_byte"] == pytest.approx(trainer["val_bpb"], rel=1e-6)
    assert rows["token_ppl"] == pytest.approx(trainer["val_ppl"], rel=1e-6)


def test_strided_perplexity_scores_each_id_once(tiny_run):
    from tlm_probe.capture.loading import wrap_model
    from tlm_probe.eval.perplexity import perplexity
    from tlm_probe.eval.scorer import Scorer, TextCodec

    _, model = tiny_run
    scorer = Scorer(wrap_model(model, ByteTokenizer()), TextCodec(ByteTokenizer()))
    ids = np.arange(200, dtype=np.int64) % 250
    res = perplexity(scorer, ids, source="x", split="val", context=32, stride=8)
    starts = list(range(0, 200 - 32, 8))
    assert res.n_tokens == 32 + 8 * (len(starts) - 1)  # ids 1..(last window end), each once
    expected = 0.0
    for k, s in enumerate(starts):  # a second path: per window, score only the ids not scored before
        with torch.no_grad():
            logp = F.log_softmax(model(torch.from_numpy(ids[None, s : s + 32]))[0].double(), -1)
        first = 0 if k == 0 else 24
        expected -= float(logp[first:].gather(-1, torch.tensor(ids[s + 1 + first : s + 33])[:, None]).sum())
    assert res.nll_sum == pytest.approx(expected, rel=1e-6)


def test_cli_writes_tidy_results(tiny_run, tmp_path):
    from cli import app

    folder, _ = tiny_run
    out = tmp_path / "ev"
    args = ["eval", str(folder), "--tasks", "pydoc-lastword", "--ppl-data", "builtin:pydoc",
            "--ppl-tokens", "512", "--limit", "3", "--out", str(out), "--threads", "1", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    import pandas as pd

    table = pd.read_parquet(out / "results.parquet")
    assert list(table.columns) == ["model", "task", "metric", "value", "stderr", "n"]
    assert set(table["task"]) == {"pydoc-lastword", "ppl:builtin:pydoc"}
    assert len(doc["results"]) == len(table)
    assert (out / "tasks" / "pydoc-lastword.yaml").is_file()
    # the config names its data file relative to itself: no absolute path, so the folder can move
    config = (out / "tasks" / "pydoc-lastword.yaml").read_text()
    assert 'test: "pydoc-lastword.jsonl"' in config and str(tmp_path) not in config


@pytest.mark.parametrize(
    "extra, needle",
    [
        ([], "nothing to evaluate"),
        (["--tasks", "missing.yaml"], "task config not found"),
        (["--tasks", "pydoc-mc", "--limit", "-1"], "--limit must be an integer in [0, 1000000000], got -1"),
        (["--ppl-data", "builtin:pydoc", "--split", "held-out"], "--split must be one of auto"),
    ],
)
def test_cli_bad_input_one_line_exit_1(tiny_run, tmp_path, extra, needle):
    from cli import app

    folder, _ = tiny_run
    res = CliRunner().invoke(app, ["eval", str(folder), "--out", str(tmp_path / "o"), *extra])
    assert res.exit_code == 1
    assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_cli_refuses_a_foreign_output_folder(tiny_run, tmp_path):
    from cli import app

    folder, _ = tiny_run
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine")
    res = CliRunner().invoke(app, ["eval", str(folder), "--tasks", "pydoc-mc", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "not a tlm eval result" in res.stderr
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["notes.txt"]


def test_cli_start_does_not_import_lm_eval():
    code = "import sys, cli; print('lm_eval' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_task_yaml_and_folder_paths_run_offline(tiny_run, tmp_path, evaluated):
    """A task given as a YAML path (or its folder) is the harness's own config route: the built-in
    pydoc-lastword config renamed must give the built-in task's numbers."""
    from tlm_probe.eval.builtin_tasks import write_task
    from tlm_probe.eval.run import EvalOptions, run_eval

    folder, _ = tiny_run
    write_task("pydoc-lastword", tmp_path / "mine")
    config = tmp_path / "mine" / "pydoc-lastword.yaml"
    config.write_text(config.read_text().replace("task: pydoc-lastword", "task: my-lastword"))
    for given in (str(config), str(tmp_path / "mine")):
        res = run_eval(str(folder), EvalOptions(tasks=[given], limit=LIMIT, batch_size=5))
        assert set(res.table["task"]) == {"my-lastword"}
        for metric in ("acc", "perplexity"):
            assert _value(res.table, "my-lastword", metric) == pytest.approx(
                _value(evaluated.table, "pydoc-lastword", metric), rel=1e-6
            )


def test_eval_options_are_the_cli_options():
    """Issue 32: `tlm eval`'s options are EvalOptions' fields (defaults and all); the old names are hidden
    aliases, and the library keeps its old keywords and a comma-string of tasks."""
    import dataclasses
    import warnings

    import typer.main

    from cli import app
    from tlm_probe.commands.options import cli_fields
    from tlm_probe.eval.run import EvalOptions

    params = {p.name: p for p in typer.main.get_group(app).commands["eval"].params}
    for f in cli_fields(EvalOptions):
        default = list(f.default) if isinstance(f.default, tuple) else f.default
        assert params[f.name].default == default, f.name
    assert params["split"].default == "auto" and params["device"].default == "auto"
    assert params["ppl_split"].hidden and params["ppl_tokens"].hidden and not params["split"].hidden
    assert {f.name for f in dataclasses.fields(EvalOptions)} == {f.name for f in cli_fields(EvalOptions)}

    opts = EvalOptions(tasks="pydoc-mc, pydoc-lastword", ppl_data=["a.txt"], limit=None)
    assert opts.tasks == ("pydoc-mc", "pydoc-lastword") and opts.ppl_data == ("a.txt",) and opts.limit == 0
    assert EvalOptions(tasks=["pydoc-mc,pydoc-lastword", " x "]).tasks == ("pydoc-mc", "pydoc-lastword", "x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = EvalOptions(ppl_split="all", ppl_tokens=5)
    assert (old.split, old.max_tokens) == ("all", 5)
    assert any(issubclass(w.category, DeprecationWarning) and "use split=" in str(w.message) for w in caught)
    with pytest.raises(TypeError, match="old name of max_tokens"):
        EvalOptions(max_tokens=10, ppl_tokens=20)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.split = "val"


def test_split_auto_is_resolved_per_perplexity_source(tiny_run, tmp_path):
    """--split auto: val of a built-in corpus (a model may have trained on it), all of the user's own text;
    the resolved split is what provenance records per source. --ppl-split (the old name) still sets it."""
    from cli import app

    folder, _ = tiny_run
    text = tmp_path / "mine.txt"
    text.write_text("\n\n".join(f"paragraph {i}: some words of my own, number {i}" for i in range(60)))
    common = ["--ppl-data", "builtin:pydoc", "--ppl-data", str(text), "--max-tokens", "256",
              "--ppl-context", "32", "--threads", "1", "--json"]
    res = CliRunner().invoke(app, ["eval", str(folder), *common, "--out", str(tmp_path / "auto")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(p["source"], p["split"]) for p in doc["provenance"]["perplexity"]] == [
        ("builtin:pydoc", "val"), (str(text), "all")]
    assert doc["provenance"]["options"]["split"] == "auto"
    assert doc["provenance"]["options"]["device"] == "cpu"  # auto, resolved
    res = CliRunner().invoke(app, ["eval", str(folder), *common, "--ppl-split", "train",
                                   "--out", str(tmp_path / "old")])
    assert res.exit_code == 0, res.output
    assert {p["split"] for p in json.loads(res.stdout)["provenance"]["perplexity"]} == {"train"}
