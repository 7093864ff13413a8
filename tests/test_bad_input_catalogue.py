"""The catalogue of malformed inputs (issue 10), each through the real CLI: exit code 1, exactly one line,
no traceback, and nothing on disk changed (names and bytes of the whole work folder before and after).

Set TLM_CATALOGUE=path.md to also write the table of what each bad input prints."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from tiny_flags import TINY
from typer.testing import CliRunner

from cli import app
from tlm_probe.files.fileio import record
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM

runner = CliRunner()
CFG = dict(vocab_size=64, d_model=16, n_layers=2, n_heads=2, max_seq_len=32)
PROVENANCE = '{"model": "m"}'
NO_CUDA = not torch.cuda.is_available()

BAD_TABLES = {
    "corrupt": "cannot read bad-corrupt/results.csv",
    "empty": "cannot read bad-empty/results.csv",
    "nonnumeric": "column 'value' holds a non-number ('abc')",
    "parquet": "cannot read bad-parquet/results.parquet",
}

# (name, what the one line must say, argv): argv uses the files that `work` creates; "out" is the output
CATALOGUE = [
    ("probe: object-dtype .npy", "dtype object", ["probe", "models/ck", "--data", "obj.npy", "--out", "out"]),
    (
        "probe: text file named .npy",
        "not a .npy file",
        ["probe", "models/ck", "--data", "text.npy", "--out", "out"],
    ),
    (
        "probe: negative token id",
        "negative token id (-2)",
        ["probe", "models/ck", "--data", "neg.npy", "--out", "out"],
    ),
    ("train: object-dtype .npy", "dtype object", ["train", "--data", "obj.npy", "--out", "out", *TINY]),
    (
        "train: text file named .npy",
        "not a .npy file",
        ["train", "--data", "text.npy", "--out", "out", *TINY],
    ),
    (
        "train: negative token id",
        "negative token id (-2)",
        ["train", "--data", "neg.npy", "--out", "out", *TINY],
    ),
    *[
        (f"{cmd}: {kind} results", needle, [cmd, f"bad-{kind}", "--out", out])
        for cmd, out in (("plot", "out/fig.png"), ("report", "out"))
        for kind, needle in BAD_TABLES.items()
    ],
    (
        'train: YAML steps: "five"',
        "steps must be an integer",
        ["train", "--config", "five.yaml", "--out", "out"],
    ),
    (
        "schedule: sigmoid steepness 2000",
        "steepness must be <= 1000",
        ["schedule", "--schedule", "sigmoid", "--steepness", "2000"],
    ),
    (
        "probe: weight shapes differ from config",
        "has shape [32, 16], config.json implies [48, 16]",
        ["probe", "models/shape", "--data", "ids.npy", "--out", "out"],
    ),
    (
        "schedule: --start with cosine:1.5:0.5",
        "drop --start",
        ["schedule", "--schedule", "cosine:1.5:0.5", "--start", "1.2"],
    ),
    (
        "probe: --max-tokens 1 --exclude-bos",
        "no token to measure",
        ["probe", "models/ck", "--data", "ids.npy", "--max-tokens", "1", "--exclude-bos", "--out", "out"],
    ),
    (
        "probe: mistyped local folder",
        "checkpoint folder not found: models/ckk",
        ["probe", "models/ckk", "--data", "ids.npy", "--out", "out"],
    ),
    (
        "info: a file, not a folder",
        "ids.npy is a file, not a checkpoint folder (a folder holding config.json)",
        ["info", "ids.npy"],
    ),
    (
        "probe: mistyped name, no folder, hub unreachable",
        "cannot load model 'models-ck': no folder 'models-ck' here, and on the hub:",
        ["probe", "models-ck", "--data", "ids.npy", "--out", "out"],
    ),
    (
        "train: --steps 0",
        "--steps must be >= 1",
        ["train", "--data", "ids.npy", "--out", "out", *TINY, "--steps", "0"],
    ),
    (
        "compare: --steps 0",
        "--steps must be >= 1",
        ["compare", "--data", "ids.npy", "--out", "out", *TINY, "--steps", "0"],
    ),
    (
        "train: --lr inf",
        "--lr must be a number in [0.0, 10.0], got inf",  # its stated range (tlm_probe/ranges.py)
        ["train", "--data", "ids.npy", "--out", "out", *TINY, "--lr", "inf"],
    ),
    (
        "train: --lr nan",
        "--lr must be a number in [0.0, 10.0], got nan",
        ["train", "--data", "ids.npy", "--out", "out", *TINY, "--lr", "nan"],
    ),
    ("train: --lr 0", "lr must be > 0", ["train", "--data", "ids.npy", "--out", "out", *TINY, "--lr", "0"]),
    ("info: weights missing", "no model.safetensors", ["info", "models/noweights"]),
    ("info: weights truncated", "is truncated", ["info", "models/truncated"]),
    ("info: weight shapes differ from config", "has shape [32, 16]", ["info", "models/shape"]),
    (
        "probe: --out under a file",
        "afile is a file",
        ["probe", "models/ck", "--data", "ids.npy", "--out", "afile/out"],
    ),
    (
        "probe: --out not writable",
        "cannot be written",
        ["probe", "models/ck", "--data", "ids.npy", "--out", "/proc/tlm-out"],
    ),
    (
        "train: --out is the user's folder",
        "tlm did not write it",
        ["train", "--data", "ids.npy", "--out", "notes", *TINY],
    ),
    (
        "compare: --out is the user's folder",
        "tlm did not write it",
        ["compare", "--data", "ids.npy", "--out", "notes", *TINY, "--schedules", "uniform,cosine:1.5:0.5"],
    ),
    (
        "data prepare: --out is the user's folder",
        "tlm did not write it",
        ["data", "prepare", "text.txt", "--out", "notes"],
    ),
    (
        "probe: --out is the user's folder",
        "tlm did not write it",
        ["probe", "models/ck", "--data", "ids.npy", "--out", "notes"],
    ),
    ("report: --out is the user's folder", "tlm did not write it", ["report", "good", "--out", "notes"]),
    (
        "train --overwrite onto the user's config.json",
        "refusing to replace clash/config.json",
        ["train", "--data", "ids.npy", "--out", "clash", "--overwrite", *TINY],
    ),
    ("demo: --steps 0", "--steps must be >= 1", ["demo", "--quick", "--steps", "0", "--out", "out"]),
    (
        "probe --overwrite onto the user's results.csv",
        "refusing to replace userres/results.csv",
        ["probe", "models/ck", "--data", "ids.npy", "--out", "userres", "--overwrite"],
    ),
    (
        "report --overwrite onto the user's report.html",
        "refusing to replace userrep/report.html",
        ["report", "good", "--out", "userrep", "--overwrite"],
    ),
    (
        "train --resume of an unfinished foreign folder",
        "no checkpoint to resume from",
        ["train", "--data", "ids.npy", "--out", "notes", "--resume", *TINY],
    ),
]
CUDA_CASES = [
    (
        "train: --device cuda without a GPU",
        "not available",
        ["train", "--data", "ids.npy", "--out", "out", *TINY, "--device", "cuda"],
    ),
    (
        "compare: --device cuda without a GPU",
        "not available",
        ["compare", "--data", "ids.npy", "--out", "out", *TINY, "--device", "cuda"],
    ),
    (
        "demo: --device cuda without a GPU",
        "not available",
        ["demo", "--quick", "--out", "out", "--device", "cuda"],
    ),
    (
        "probe: --device cuda without a GPU",
        "not available",
        ["probe", "models/ck", "--data", "ids.npy", "--device", "cuda", "--out", "out"],
    ),
]


def _tiny(d_ff=(48, 16)) -> TaperedLM:
    torch.manual_seed(0)
    return TaperedLM(TLMConfig(d_ff=d_ff, **CFG))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("catalogue")
    save_tlm(_tiny(), root / "models" / "ck")
    save_tlm(_tiny(), root / "models" / "shape")
    save_tlm(_tiny((32, 32)), root / "models" / "other")
    (root / "models" / "shape" / "model.safetensors").write_bytes(
        (root / "models" / "other" / "model.safetensors").read_bytes()
    )  # weights of another width
    save_tlm(_tiny(), root / "models" / "truncated")
    w = root / "models" / "truncated" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-100])
    save_tlm(_tiny(), root / "models" / "noweights")
    (root / "models" / "noweights" / "model.safetensors").unlink()
    np.save(root / "ids.npy", np.arange(4096) % 64)
    np.save(root / "obj.npy", np.array([{"a": 1}, 2], dtype=object), allow_pickle=True)
    np.save(root / "neg.npy", np.array([3, -2, 5] * 200))
    (root / "text.npy").write_text("these are not token ids\n")
    (root / "text.txt").write_text("\n\n".join(f"paragraph {i} of a tiny corpus" for i in range(100)))
    (root / "five.yaml").write_text('steps: "five"\n')
    (root / "afile").write_text("a file, not a folder")
    header = "model,layer,depth,statistic,value,ci_low,ci_high,n_tokens,d_ff\n"
    tables = {
        "corrupt": b'\x00\x01\x02 not,a\ncsv\x00\n"unclosed',
        "empty": b"",
        "nonnumeric": (header + "m,0,0.0,align_mlp_mid,abc,0,1,10,64\n").encode(),
    }
    for kind, data in tables.items():
        (root / f"bad-{kind}").mkdir()
        (root / f"bad-{kind}" / "results.csv").write_bytes(data)
        (root / f"bad-{kind}" / "provenance.json").write_text(PROVENANCE)
    (root / "bad-parquet").mkdir()
    (root / "bad-parquet" / "results.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    (root / "good").mkdir()
    (root / "good" / "results.csv").write_text(header + "m,0,0.0,align_mlp_mid,0.5,0.4,0.6,10,64\n")
    (root / "good" / "provenance.json").write_text(PROVENANCE)
    (root / "notes").mkdir()
    (root / "notes" / "NOTES.md").write_text("the user's notes")
    (root / "userres").mkdir()
    (root / "userres" / "results.csv").write_text("the user's own results")
    (root / "userrep").mkdir()
    (root / "userrep" / "report.html").write_text("<p>the user's own page</p>")
    (root / "clash").mkdir()
    record(root / "clash", ["metrics.jsonl"], "train")  # a run folder tlm wrote ...
    (root / "clash" / "metrics.jsonl").write_text("")
    (root / "clash" / "config.json").write_text('{"mine": true}')  # ... and the user's own config.json
    save_file({"w": torch.zeros(2)}, str(root / "models" / "other" / "extra.safetensors"))
    return root


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def _run(work: Path, argv: list[str], needle: str, monkeypatch) -> str:
    monkeypatch.chdir(work)
    before = snapshot(work)
    r = runner.invoke(app, argv)
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.output
    assert snapshot(work) == before, "the work folder changed"
    if os.environ.get("TLM_CATALOGUE"):
        with open(os.environ["TLM_CATALOGUE"], "a") as f:
            shown = " ".join(argv).replace(" ".join(TINY), "TINY")
            f.write(f"| `tlm {shown}` | {lines[0]} |\n")
    return lines[0]


@pytest.mark.parametrize("needle,argv", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE])
def test_bad_input_is_one_line_exit_1_and_changes_nothing(work, needle, argv, monkeypatch):
    _run(work, argv, needle, monkeypatch)


@pytest.mark.skipif(not NO_CUDA, reason="needs a machine without CUDA")
@pytest.mark.parametrize("needle,argv", [c[1:] for c in CUDA_CASES], ids=[c[0] for c in CUDA_CASES])
def test_cuda_on_a_cpu_machine_is_refused_before_writing(work, needle, argv, monkeypatch):
    _run(work, argv, needle, monkeypatch)


def test_catalogue_size():
    assert len(CATALOGUE) + len(CUDA_CASES) >= 40
