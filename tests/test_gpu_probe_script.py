"""benchmarks/gpu_probe.py, the prepared GPU check of the probe, runs on CPU (--device cpu) and refuses
--device cuda in one line where there is no CUDA device."""

import json

import pytest
import torch

from benchmarks import gpu_probe


def test_runs_on_cpu_and_writes_its_figures(tmp_path, capsys):
    out = tmp_path / "gpu_probe.json"
    # --only probe: the training half has its own test (test_gpu_train_script.py)
    res = gpu_probe.main(["--device", "cpu", "--quick", "--rounds", "1", "--only", "probe",
                          "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    assert res["device"] == "cpu" and "skipped" in res["agreement"]
    ov = res["overheads"]
    assert ov["probe / plain forward (alignment, with head)"]["median"] > 0
    assert ov["importance pass count (forwards)"] > 1
    lens = res["logit_lens"]
    assert 0 < lens["lens_positions=0"]["time_share"] <= 1 and lens["lens_positions=64"]["seconds"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_device_is_one_line_error(capsys):
    with pytest.raises(SystemExit) as e:
        gpu_probe.main(["--device", "cuda", "--quick"])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_auto_falls_back_to_cpu_and_says_so(capsys):
    assert gpu_probe.pick_device("auto") == "cpu"
    assert "CPU figures, not GPU ones" in capsys.readouterr().err


def readme_keys(label: str) -> list[str]:
    """The " | " list after `label:` in docs/reference/development.md's block of what the GPU check prints
    (a note after three spaces left out)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "development.md").read_text()
    after = text.split("What the GPU check prints, one JSON object", 1)[1]
    block = after.split("```text", 1)[1].split("```", 1)[0]
    line = next(ln for ln in block.splitlines() if ln.strip().startswith(f"{label}:"))
    return [k.strip() for k in line.split(":  ", 1)[1].split("   ")[0].split(" | ")]


def test_the_readme_lists_what_the_probe_half_prints(tmp_path):
    res = gpu_probe.main(["--device", "cpu", "--quick", "--rounds", "1", "--only", "probe",
                          "--out", str(tmp_path / "g.json")])
    assert readme_keys("probe half") == list(res)
    assert readme_keys("overheads") == list(res["overheads"])
    assert readme_keys("logit_lens") == list(res["logit_lens"])
