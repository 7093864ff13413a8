"""transformers' Auto classes load a `tlm train` folder (issue 47 papercut a): in a fresh process,
transformers imported before tlm_probe finds model_type "tlm" registered (no call); tlm_probe imported
first, the folder's own auto_map + modeling_tlm.py load it with trust_remote_code=True, and without that
flag transformers says to pass it (not to upgrade). Logits equal those of tlm_probe's load_tlm, computed
in this process from the same files; a folder written before auto_map existed still loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app
from tlm_probe.models.io import load_tlm
from tlm_probe.models.remote_code import CODE_FILE

ROOT = Path(__file__).resolve().parents[1]
IDS = [[3, 17, 101, 42, 7, 250, 9, 64]]

TRANSFORMERS_FIRST = """
import sys, numpy as np, torch
from transformers import AutoModelForCausalLM
import tlm_probe
for folder, out in zip(sys.argv[1::2], sys.argv[2::2]):
    m = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(m).__module__ == "tlm_probe.models.hf", type(m)  # registered: no folder code ran
    with torch.no_grad():
        np.save(out, m(torch.tensor(IDS)).logits.numpy())
"""

TLM_PROBE_FIRST = """
import sys, numpy as np, torch
import tlm_probe
from transformers import AutoModelForCausalLM
try:
    AutoModelForCausalLM.from_pretrained(sys.argv[1])
except ValueError as e:
    print("\\nREFUSED:", str(e).replace("\\n", " "))  # after the prompt transformers may have printed
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
assert type(m).__module__.endswith(".modeling_tlm"), type(m)  # the folder's code file
with torch.no_grad():
    np.save(sys.argv[2], m(torch.tensor(IDS)).logits.numpy())
"""


def _run(script: str, args: list, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_MODULES_CACHE": str(tmp_path / "hf-modules"),
           "TRANSFORMERS_VERBOSITY": "error"}  # a load report (MISSING weights) would then still print
    res = subprocess.run([sys.executable, "-c", f"IDS = {IDS}\n{script}", *map(str, args)], env=env,
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "MISSING" not in res.stdout + res.stderr, res.stdout + res.stderr  # every weight from the file
    return res


def _trained(tmp_path: Path, corpus_text: str) -> Path:
    (tmp_path / "corpus.txt").write_text(corpus_text)
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", "--out", str(run), "--data", str(tmp_path / "corpus.txt"), *TINY])
    assert r.exit_code == 0, r.output
    return run


def _old_copy(run: Path, old: Path) -> Path:
    """The folder as tlm wrote it before auto_map: no code file, no architectures/auto_map keys."""
    old.mkdir()
    cfg = json.loads((run / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({k: v for k, v in cfg.items()
                                                 if k not in ("architectures", "auto_map")}, indent=2))
    (old / "model.safetensors").write_bytes((run / "model.safetensors").read_bytes())
    return old


def _reference(folder: Path) -> np.ndarray:
    with torch.no_grad():
        return load_tlm(folder)(torch.tensor(IDS)).numpy()


def _close(got: np.ndarray, ref: np.ndarray) -> None:
    # the same float32 arithmetic in two processes: equal up to a few ulps of the logits' scale
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 8 * np.finfo(np.float32).eps * max(1.0, np.abs(ref).max())


def test_auto_model_loads_a_trained_run_in_both_import_orders(tmp_path):
    text = "\n\n".join(f"paragraph {i}: the tapered model reads word {i * 7 % 13} twice" for i in range(200))
    run = _trained(tmp_path, text)
    cfg = json.loads((run / "config.json").read_text())
    assert (run / CODE_FILE).is_file() and cfg["architectures"] == ["TLMForCausalLM"]
    assert CODE_FILE in json.loads((run / ".tlm-manifest.json").read_text())["entries"]  # tlm owns it
    old = _old_copy(run, tmp_path / "old")
    ref = _reference(run)
    assert np.abs(ref - _reference(old)).max() == 0  # the weights are the same file

    _run(TRANSFORMERS_FIRST, [run, tmp_path / "a.npy", old, tmp_path / "b.npy"], tmp_path)
    _close(np.load(tmp_path / "a.npy"), ref)
    _close(np.load(tmp_path / "b.npy"), ref)

    res = _run(TLM_PROBE_FIRST, [run, tmp_path / "c.npy"], tmp_path)
    refused = [x for x in res.stdout.splitlines() if x.startswith("REFUSED:")]
    assert refused and "trust_remote_code=True" in refused[0] and "upgrade" not in refused[0], res.stdout
    _close(np.load(tmp_path / "c.npy"), ref)


def test_a_resumed_run_from_before_the_code_file_records_it_first(tmp_path):
    """tlm train --resume of a run whose manifest predates modeling_tlm.py: the file is recorded before
    save_tlm writes it (so a later --overwrite removes it as tlm's own); a file of that name someone else
    put there is refused; a run without a manifest gains none."""
    import pytest

    from tlm_probe.errors import UserError
    from tlm_probe.files.fileio import read_manifest, record
    from tlm_probe.train.run import RUN_FILES, _own_code_file

    old = tmp_path / "old"
    record(old, RUN_FILES[:7], "train")  # what train recorded before
    _own_code_file(old)
    assert CODE_FILE in read_manifest(old)
    theirs = tmp_path / "theirs"
    record(theirs, RUN_FILES[:7], "train")
    (theirs / CODE_FILE).write_text("# mine\n")
    with pytest.raises(UserError, match="tlm did not write it"):
        _own_code_file(theirs)
    bare = tmp_path / "bare"
    bare.mkdir()
    _own_code_file(bare)
    assert read_manifest(bare) == []
