"""benchmarks/gpu_train.py, the prepared GPU check of the trainer, runs end to end on CPU (--quick: tiny
configs, aot_eager for the compile check) and writes what it prints; benchmarks.gpu_probe runs it too."""

import json

from benchmarks import gpu_probe, gpu_train


def test_runs_on_cpu_and_writes_its_figures(tmp_path):
    out = tmp_path / "gpu_train.json"
    res = gpu_train.main(["--device", "cpu", "--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    step = res["step"]
    assert step["same params and FLOPs/token"] and step["step time, cosine / uniform"]["median"] > 0
    assert len(set(step["cosine:1.5:0.5"]["d_ff"])) > 1 and len(set(step["uniform"]["d_ff"])) == 1
    assert step["uniform"]["memory"] == "n/a on CPU" and 0 < step["uniform"]["mfu"] < 1  # CPU: measured peak
    bf16 = res["bf16"]
    assert bf16["steps"] == 50 and bf16["same weights: ok"] and bf16["trajectories: ok"]
    assert 0 < bf16["same weights: max |loss bf16 - fp32|"]  # CPU bf16 autocast did round something
    comp = res["compile"]
    assert comp["backend"] == "aot_eager" and comp["block shapes (graphs)"] == len(set(comp["d_ff"])) > 1
    assert comp["ok"] and comp["max |grad diff| / max |grad| (per tensor)"] <= comp["bound (relative)"]
    assert res["sdpa_flash"] == "n/a on CPU"


def test_the_probe_script_runs_the_training_checks_in_the_same_command(tmp_path, monkeypatch):
    calls = []

    def fake_run(device, quick, peak):  # the training half itself is the test above
        calls.append((device, quick, peak))
        return {"checked": True}

    monkeypatch.setattr(gpu_train, "run", fake_run)
    out = tmp_path / "both.json"
    res = gpu_probe.main(["--device", "cpu", "--quick", "--only", "train", "--peak-flops", "5e14",
                          "--out", str(out)])
    assert calls == [("cpu", True, 5e14)] and res == {"device": "cpu", "train": {"checked": True}}
    assert json.loads(out.read_text()) == res


def test_the_readme_lists_what_the_training_half_prints(tmp_path):
    from test_gpu_probe_script import readme_keys

    res = gpu_train.main(["--device", "cpu", "--quick", "--out", str(tmp_path / "t.json")])
    assert readme_keys("train") == list(res)
    assert readme_keys("step") == list(res["step"])
    assert readme_keys("step (each schedule)") == list(res["step"]["uniform"])
