"""Issue 18, `tlm eval` security: a task YAML's `!function` code runs only with --trust-task-code, and an
evaluation of a local model on local tasks opens no network connection even when HF_HUB_OFFLINE is unset."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cli import app
from tlm_probe.errors import UserError
from tlm_probe.eval.builtin_tasks import TASKS
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer

runner = CliRunner()


@pytest.fixture(scope="module")
def ck(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("sec") / "ck"
    save_tlm(TaperedLM(TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(64, 64), max_seq_len=512)), folder)
    ByteTokenizer().save(folder)
    return folder


def _task_with_code(folder: Path, marker: Path, name: str = "sneaky") -> Path:
    """A valid multiple-choice task on a local JSONL whose process_docs is `!function utils.mark`;
    importing utils.py (what lm-eval does to resolve the tag) writes `marker`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "utils.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("code from a task file ran")

        def mark(docs):
            return docs
    """))
    (folder / "docs.jsonl").write_text("".join(
        f'{{"context": "x = {i}", "choices": ["a", "b"], "label": {i % 2}}}\n' for i in range(4)))
    yaml = folder / f"{name}.yaml"
    yaml.write_text(textwrap.dedent(f"""
        task: {name}
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {folder / "docs.jsonl"}
        output_type: multiple_choice
        test_split: test
        process_docs: !function utils.mark
        doc_to_text: "{{{{context}}}}"
        doc_to_choice: "{{{{choices}}}}"
        doc_to_target: label
        metric_list:
          - metric: acc
    """))
    return yaml


def _refused(argv: list[str], needle: str) -> str:
    r = runner.invoke(app, argv)
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and "Traceback" not in r.output, (r.exit_code, r.output, r.exception)
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.output
    return lines[0]


# ---- 7. !function code in a task file -------------------------------------------------------------
def test_a_task_file_with_code_is_refused_and_its_code_never_runs(ck, tmp_path):
    marker = tmp_path / "MARKER"
    yaml = _task_with_code(tmp_path / "tasks", marker)
    out = tmp_path / "ev"
    line = _refused(["eval", str(ck), "--tasks", str(yaml), "--limit", "2", "--out", str(out)],
                    "--trust-task-code")
    assert str(yaml) in line and "!function utils.mark" in line
    assert not marker.exists() and not out.exists()


@pytest.mark.parametrize("how", ["include", "folder", "python tag"])
def test_code_reached_another_way_is_refused(ck, tmp_path, how):
    marker = tmp_path / "MARKER"
    base = _task_with_code(tmp_path / "tasks", marker, name="base")
    given = {"folder": tmp_path / "tasks"}.get(how)
    if how == "include":  # the code sits in the file that the given one includes
        given = tmp_path / "tasks" / "child.yaml"
        given.write_text("include: base.yaml\ntask: child\n")
    if how == "python tag":  # PyYAML's python/name imports the module it names
        given = tmp_path / "other" / "t.yaml"
        given.parent.mkdir()
        given.write_text("task: t\nprocess_docs: !!python/name:os.system\n")
    argv = ["eval", str(ck), "--tasks", str(given), "--out", str(tmp_path / "ev")]
    line = _refused(argv, "runs Python code")
    assert (str(base) if how != "python tag" else str(given)) in line
    assert not marker.exists() and not (tmp_path / "ev").exists()


def test_the_harness_importer_refuses_code_outside_lm_eval(tmp_path):
    """The second line of defence, without the pre-check: lm-eval's own YAML loader under the guard."""
    from lm_eval.tasks._yaml_loader import load_yaml

    from tlm_probe.eval.task_code import harness_code_guard

    marker = tmp_path / "MARKER"
    yaml = _task_with_code(tmp_path / "tasks", marker)
    with pytest.raises(UserError, match="runs Python code .!function utils.mark"), harness_code_guard(False):
        load_yaml(yaml, resolve_func=True)
    assert not marker.exists()
    with harness_code_guard(False):  # lm-eval's own task code (installed with it) still loads
        import lm_eval.tasks

        own = Path(lm_eval.tasks.__file__).parent / "hellaswag" / "hellaswag.yaml"
        assert callable(load_yaml(own, resolve_func=True)["process_docs"])


def test_trust_task_code_runs_it(ck, tmp_path):
    marker = tmp_path / "MARKER"
    yaml = _task_with_code(tmp_path / "tasks", marker)
    r = runner.invoke(app, ["eval", str(ck), "--tasks", str(yaml), "--limit", "2", "--trust-task-code",
                            "--json", "--out", str(tmp_path / "ev")])
    assert r.exit_code == 0, r.output
    assert marker.read_text() == "code from a task file ran"
    assert (tmp_path / "ev" / "results.csv").is_file()


# ---- 6. no network unless asked --------------------------------------------------------------------
def test_local_model_and_tasks_open_no_connection(ck, tmp_path, monkeypatch):
    """As a process started without HF_HUB_OFFLINE: the variables unset and the constants the libraries
    read at import set to online. Any DNS lookup or connect is recorded (and fails, as offline)."""
    import datasets.config
    import huggingface_hub.constants

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    calls = []

    def no_network(*args, **kwargs):
        calls.append(args[:2])
        raise OSError("the test forbids network access")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", lambda self, *a: no_network(*a))
    r = runner.invoke(app, ["eval", str(ck), "--tasks", "pydoc-mc", "--limit", "2", "--ppl-data",
                            "builtin:pydoc", "--ppl-tokens", "256", "--json", "--out", str(tmp_path / "ev")])
    assert r.exit_code == 0, r.output
    assert calls == [], f"network calls: {calls}"
    assert "HF_HUB_OFFLINE" not in os.environ  # restored after the command
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False
    assert sys.modules["datasets.config"].HF_HUB_OFFLINE is False


def test_only_a_hub_name_may_reach_the_network(ck, tmp_path):
    from tlm_probe.eval.offline import is_local

    local = str(ck)
    assert is_local(local, ["pydoc-mc"], ["builtin:pydoc"], set(TASKS))
    assert is_local(local, [str(tmp_path)], [], set(TASKS))  # a folder of task files
    assert not is_local("HuggingFaceTB/SmolLM2-135M", ["pydoc-mc"], [], set(TASKS))  # a hub model
    assert not is_local(local, ["hellaswag"], [], set(TASKS))  # a harness task: its dataset
    assert not is_local(local, ["pydoc-mc"], ["hf:wikitext"], set(TASKS))  # an hf: source
