"""--compile compiles each block on its own (train/compile.py): every distinct block shape gets its graph
(none is left to run eagerly at Dynamo's recompile limit, also for a second model in the same process),
the compiled model's losses and gradients equal the eager model's within a float32 bound, and a compiled
run's checkpoints keep the plain state-dict names, so it saves and resumes as an eager run does.

Backends: "eager" (Dynamo's graphs run by eager kernels) where only the graphs are counted, "aot_eager"
(plus AOTAutograd's forward/backward graphs) where numbers are compared. Inductor, what --compile uses, takes
~2 minutes to build its C++ kernels for a 3-shape tiny model on this 2-core machine: too slow for the suite
(measured once by hand: max relative gradient difference 5.1e-7, inside the bound below);
benchmarks/gpu_train.py runs it on a GPU."""

import copy
import math

import pytest
import torch
from safetensors import safe_open
from torch._dynamo.utils import counters

from tlm_probe.models.config import config_with_schedule
from tlm_probe.models.tlm import TaperedLM, next_token_nll
from tlm_probe.results import read_metrics
from tlm_probe.schedules.widths import parse_schedule
from tlm_probe.train import compile as block_compile
from tlm_probe.train.checkpoint import step_folders
from tlm_probe.train.compile import block_shapes, compile_blocks

EPS32 = 2.0**-23


def tapered(layers: int, d_ff: int, multiple_of: int = 16, d_model: int = 16):
    spec = parse_schedule("cosine:1.5:0.5", multiple_of)
    return config_with_schedule(spec, d_ff, d_model=d_model, n_layers=layers, n_heads=2, vocab_size=64,
                                max_seq_len=32)


def fp32_bound(cfg, seq: int) -> float:
    """Same arithmetic, other fusion and summation order: a K-term sum errs by ~sqrt(K)·eps relative (K the
    widest inner dimension), 4L + 2 such sums along a path (4 matmul groups a block, the head's 2), x4 for
    the backward's two matmuls per forward one and the loss's mean."""
    return 4 * (4 * cfg.n_layers + 2) * math.sqrt(max(cfg.d_model, max(cfg.d_ff), seq)) * EPS32


def test_every_block_shape_gets_its_graph_also_in_a_second_model():
    # 12 tapered layers: 10 and 12 distinct widths, more than Dynamo's default limit of 8 graphs per code
    # object (without raising it, blocks 9 on ran eagerly with only a warning); the second model comes
    # after the first in the same process, whose graphs Dynamo keeps
    counters.clear()
    seen: set = set()
    for d_ff in (256, 512):
        cfg = tapered(12, d_ff)
        model = TaperedLM(cfg)
        shapes = compile_blocks(model, backend="eager")
        assert shapes == len(set(cfg.d_ff)) == len(block_shapes(model)) > 8
        seen |= set(cfg.d_ff)
        ids = torch.randint(0, 64, (2, 9))
        next_token_nll(model(ids[:, :-1]), ids).backward()
        # one graph per width seen so far: a width the first model had reuses its graph (parameters are
        # graph inputs, guarded by shape), a new one gets its own
        assert counters["stats"]["unique_graphs"] == len(seen)
    assert counters["frames"]["total"] == counters["frames"]["ok"]  # no frame fell back to eager


def test_identical_blocks_share_one_graph():
    counters.clear()
    cfg = config_with_schedule("uniform", 64, d_model=16, n_layers=6, n_heads=2, vocab_size=64,
                               max_seq_len=32)
    model = TaperedLM(cfg)
    assert compile_blocks(model, backend="eager") == 1
    ids = torch.randint(0, 64, (2, 9))
    next_token_nll(model(ids[:, :-1]), ids).backward()
    assert counters["stats"]["unique_graphs"] == 1


def test_compiled_losses_and_gradients_equal_eager_and_names_stay_plain():
    torch.manual_seed(0)
    cfg = tapered(2, 64, d_model=32)
    eager = TaperedLM(cfg)
    compiled = copy.deepcopy(eager)
    compile_blocks(compiled, backend="aot_eager")
    assert list(compiled.state_dict()) == list(eager.state_dict())  # no `_orig_mod.` anywhere
    bound = fp32_bound(cfg, 16)
    opt = torch.optim.SGD(eager.parameters(), lr=0.5)
    for _ in range(3):  # a few steps: the first compiles, the next ones run the cached graphs
        ids = torch.randint(0, 64, (4, 17))
        losses = []
        for m in (eager, compiled):
            m.zero_grad()
            loss = next_token_nll(m(ids[:, :-1]), ids)
            loss.backward()
            losses.append(float(loss.detach()))
        assert abs(losses[1] - losses[0]) <= bound * abs(losses[0])
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters(), strict=True):
            assert (a.grad - b.grad).abs().max() <= bound * a.grad.abs().max(), name
        opt.step()
        compiled.load_state_dict(eager.state_dict())  # the same weights again for the next step


def _keys(path):
    with safe_open(str(path), "pt") as f:
        return sorted(f.keys())


def test_a_compiled_run_checkpoints_plain_names_and_resumes_like_an_eager_run(tmp_path, monkeypatch):
    from test_train import train

    from tlm_probe.train import loop

    monkeypatch.setattr(block_compile, "BACKEND", "aot_eager")
    compiled_shapes = []

    def spy(model):
        compiled_shapes.append(compile_blocks(model))
        return compiled_shapes[-1]

    monkeypatch.setattr(loop, "compile_blocks", spy)
    kw = dict(schedule="cosine:1.5:0.5", multiple_of=16, steps=4, ckpt_interval=2, eval_interval=4)
    train(tmp_path, "eager", **kw)
    train(tmp_path, "compiled", stop_at=2, compile=True, **kw)
    train(tmp_path, "compiled", resume=True, compile=True, **kw)
    assert compiled_shapes == [2, 2]  # both compiled trainers (the run, its resume) compiled their 2 shapes
    for run in ("eager", "compiled"):
        assert not any("_orig_mod" in k for k in _keys(tmp_path / run / "model.safetensors"))
    weights = "model.safetensors"
    assert _keys(tmp_path / "compiled" / weights) == _keys(tmp_path / "eager" / weights)
    ckpt = step_folders(tmp_path / "compiled")[-1] / "model.safetensors"
    assert _keys(ckpt) == _keys(step_folders(tmp_path / "eager")[-1] / "model.safetensors")

    def curve(run):
        return [(m["step"], m["train_loss"]) for m in read_metrics(tmp_path / run) if m["kind"] == "train"]

    cfg = tapered(2, 64, d_model=32)  # test_train's TINY: 2 layers of d 32, d_ff 64, sequences of 16
    bound = 4 * fp32_bound(cfg, 16)  # 4 AdamW steps: weights differ by their gradients' differences, x steps
    eager_curve, comp_curve = curve("eager"), curve("compiled")
    assert [s for s, _ in comp_curve] == [s for s, _ in eager_curve] == [1, 2, 3, 4]
    for (_, a), (_, b) in zip(eager_curve, comp_curve, strict=True):
        assert b == pytest.approx(a, rel=bound)
