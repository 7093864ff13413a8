"""Head-tapered models (issue 23) downstream: the attention against a float64 second path, generation with
a per-layer KV cache (cached == uncached), save_pretrained/AutoModel and our checkpoints bit-equal, resume
bitwise, the probe's three backends, and the CLI (`tlm schedule --component`, `tlm train --heads-schedule`,
the comparison's budget check)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from swap_check import same_loss_and_grads
from typer.testing import CliRunner

from cli import app
from tlm_probe.models.config import config_with_schedule
from tlm_probe.models.hf import TLMForCausalLM, TLMHFConfig
from tlm_probe.models.io import load_tlm, save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.schedules.widths import make_schedule, parse_schedule

runner = CliRunner()
EPS = torch.finfo(torch.float32).eps
pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny forwards lose from threads


def _cfg(mixer="attention", **kw):
    """4 layers, 4 query heads and 2 key/value heads of width 8 uniform; heads (6, 4, 4, 2) and key/value
    heads (3, 2, 2, 1) tapered (cosine 1.5 -> 0.5 on both)."""
    base = dict(vocab_size=50, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=64,
                init_scale=0.3, mixer=mixer)
    return config_with_schedule(parse_schedule("cosine:1.5:0.5", 16), 64, heads="cosine:1.5:0.5",
                                kv="cosine:1.5:0.5", **{**base, **kw})


def test_config_is_tapered_as_documented():
    cfg = _cfg()
    assert cfg.layer_heads == (6, 4, 4, 2) and cfg.layer_kv_heads == (3, 2, 2, 1)


def _attention_float64(attn, x: torch.Tensor) -> torch.Tensor:
    """Causal GQA attention with RoPE, written out in float64 from the module's weights (heads_at(l)
    queries, kv_heads_at(l) keys/values, query head j reading key/value head j // (H / H_kv))."""
    B, T, _ = x.shape
    H, KV, dh = attn.n_heads, attn.kv_heads, attn.d_head
    x = x.double()
    q = (x @ attn.W_Q.weight.double().T).view(B, T, H, dh).transpose(1, 2)
    k = (x @ attn.W_K.weight.double().T).view(B, T, KV, dh).transpose(1, 2)
    v = (x @ attn.W_V.weight.double().T).view(B, T, KV, dh).transpose(1, 2)
    pos = torch.arange(T)
    inv = 1.0 / (attn.rotary.theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    ang = torch.cat([torch.outer(pos.double(), inv)] * 2, -1)

    def rope(t):
        a, b = t.chunk(2, -1)
        return t * ang.cos() + torch.cat([-b, a], -1) * ang.sin()

    q, k = rope(q), rope(k)
    k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
    s = (q @ k.transpose(-1, -2)) / dh**0.5
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    z = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * dh)
    return z @ attn.W_O.weight.double().T


def test_each_layers_attention_equals_a_float64_second_path():
    torch.manual_seed(0)
    model = TaperedLM(_cfg(init_scale=0.1)).eval()
    x = torch.randint(0, 50, (2, 12))
    _, cache = model.run_with_cache(x)
    for l, block in enumerate(model.blocks):
        assert block.attn.n_heads == model.cfg.heads_at(l) and block.attn.kv_heads == model.cfg.kv_heads_at(l)
        inp = block.ln1(cache[f"blocks.{l}.hook_resid_pre"])
        ref = _attention_float64(block.attn, inp)
        got = cache[f"blocks.{l}.hook_attn_out"]
        # float32 products and sums of length <= 48 (d_model 32, h·d_head <= 48): well inside 64·48·eps·scale
        assert (got.double() - ref).abs().max() <= 64 * 48 * EPS * ref.abs().max(), l


def _hf(mixer="attention", positions="rope"):
    torch.manual_seed(0)
    return TLMForCausalLM(TLMHFConfig(**_cfg(mixer, positions=positions).to_dict())).eval()


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("mixer, positions", [("attention", "rope"), ("gated_attention", "learned")])
def test_cached_greedy_equals_uncached_with_per_layer_cache_shapes(mixer, positions, cache):
    """A StaticCache preallocates its whole length (21 here) per layer, sized from each layer's own keys;
    before, its 4-D mask and unfilled zeros reached the attention and generate() raised."""
    model = _hf(mixer, positions)
    x = torch.tensor([[7, 1, 8, 8, 11, 3]])
    kw = dict(max_new_tokens=16, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
              output_logits=True)
    cached = model.generate(x, use_cache=True, cache_implementation=cache, **kw)
    uncached = model.generate(x, use_cache=False, **kw)
    assert cached.sequences.tolist() == uncached.sequences.tolist()
    assert len(set(cached.sequences[0, 6:].tolist())) > 3, "degenerate model: the test would see nothing"
    cache = cached.past_key_values
    assert [layer.keys.shape[1] for layer in cache.layers] == [3, 2, 2, 1]  # kv_heads_at(l) per layer
    assert [layer.values.shape[1] for layer in cache.layers] == [3, 2, 2, 1]
    # each step's logits (one new token against the cache) equal the full forward's at that position:
    # the same float32 sums (lengths <= 64) in another order, through 4 layers: <= 4·64·16·eps·scale
    with torch.no_grad():
        full = TaperedLM.forward(model, cached.sequences[:, :-1])[0, 5:]
    steps = torch.cat(cached.logits)
    assert (steps - full).abs().max() <= 4 * 64 * 16 * EPS * full.abs().max()


def test_static_cache_generation_with_left_padding_equals_uncached():
    """A batch with left padding: the (B, S) padding mask reaches the model unchanged with either cache."""
    model = _hf()
    x = torch.tensor([[0, 0, 7, 1, 8, 3], [5, 7, 1, 8, 8, 11]])
    am = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])
    kw = dict(attention_mask=am, max_new_tokens=12, do_sample=False, pad_token_id=0)
    uncached = model.generate(x, use_cache=False, **kw)
    static = model.generate(x, use_cache=True, cache_implementation="static", **kw)
    assert static.tolist() == uncached.tolist()


def test_save_pretrained_auto_model_and_our_checkpoint_round_trip_bit_equal(tmp_path):
    from transformers import AutoModelForCausalLM

    import tlm_probe

    tlm_probe.register_with_transformers()  # model_type "tlm" with the Auto classes (public API)

    torch.manual_seed(1)
    model = TaperedLM(_cfg()).eval()
    x = torch.randint(0, 50, (2, 10))
    save_tlm(model, tmp_path / "a")
    ours = load_tlm(tmp_path / "a")
    assert ours.cfg == model.cfg and ours.cfg.layer_heads == (6, 4, 4, 2)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "a").eval()
    hf.save_pretrained(tmp_path / "b")  # heads travel in config.json
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "b").eval()
    assert json.loads((tmp_path / "b" / "config.json").read_text())["layer_kv_heads"] == [3, 2, 2, 1]
    ref = model.state_dict()
    for m in (ours, hf, again):
        sd = m.state_dict()
        assert sd.keys() == ref.keys() and all(torch.equal(sd[k], ref[k]) for k in ref)
    with torch.no_grad():
        want = model(x)
        assert torch.equal(ours(x), want) and torch.equal(again(x).logits, want)


def test_resume_of_a_head_tapered_run_is_bit_identical(tmp_path):
    from test_train import TINY, byte_data

    from tlm_probe.results import read_metrics
    from tlm_probe.train.config import TrainConfig
    from tlm_probe.train.loop import Trainer
    from tlm_probe.train.run import plan_run

    kw = {**TINY, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "heads_schedule": "cosine:1.5:0.5",
          "kv_schedule": "cosine:1.5:0.5", "multiple_of": 16, "steps": 6, "ckpt_interval": 2, "dropout": 0.1}

    def train(name, stop_at=None, resume=False):
        plan = plan_run(TrainConfig(**kw), tmp_path / name, data=byte_data(), resume=resume)
        return Trainer(plan, stop_at=stop_at).run()

    train("full")
    assert train("split", stop_at=3)["interrupted"]
    train("split", resume=True)
    assert load_tlm(tmp_path / "full").cfg.layer_kv_heads == (3, 2, 2, 1)
    assert read_metrics(tmp_path / "full") and [
        (m["step"], m.get("train_loss"), m.get("val_loss")) for m in read_metrics(tmp_path / "full")
    ] == [(m["step"], m.get("train_loss"), m.get("val_loss")) for m in read_metrics(tmp_path / "split")]
    a, b = (load_file(str(tmp_path / r / "model.safetensors")) for r in ("full", "split"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_probe_backends_agree_on_a_head_tapered_model(tmp_path):
    from tlm_probe.api.library import probe
    from tlm_probe.capture import load_probe_model

    torch.manual_seed(0)
    folder = save_tlm(TaperedLM(_cfg(init_scale=0.02, max_seq_len=32)), tmp_path / "tlm")
    ids = np.random.default_rng(0).integers(0, 50, 150).astype(np.uint32)
    out = {b: probe(load_probe_model(folder), ids, backend=b, max_tokens=None, batch_size=3, seq_len=32)
           for b in ("native", "transformer-lens", "nnsight")}
    assert len(out["native"]) and out["native"].value.notna().all()
    for b in ("transformer-lens", "nnsight"):  # the same hooks: float32 statistics agree to 1e-5 (as for
        assert np.allclose(out[b].value, out["native"].value, atol=1e-5, rtol=0), b  # uniform models)


def _fails_cleanly(args) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 1, (r.exit_code, r.output)
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in r.output, err
    return err


def test_schedule_component_heads_and_kv_print_exact_parity():
    arch = ["--layers", "8", "--d-model", "512", "--heads", "8", "--kv-heads", "4", "--d-ff", "1024",
            "--json"]
    for component in ("heads", "kv"):
        r = runner.invoke(app, ["schedule", "--component", component, "--schedule", "cosine:1.5:0.5", *arch])
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert sum(out["values"]) == 8 * out["uniform_value"] and out["parity"] is True
        assert out["params"] == out["uniform_params"]
        assert out["kv_bytes_per_token"] == sum(out["layer_kv_bytes"])
        assert all(h % k == 0 for h, k in zip(out["heads"], out["kv_heads"], strict=True))
        assert out["values"] != [out["uniform_value"]] * 8 and out["monotone"].startswith("non-increasing")
    err = _fails_cleanly(["schedule", "--component", "kv", "--preset", "tlm-440m", "--schedule", "cosine"])
    assert "uniform's" in err  # multi-head attention: a key/value taper can only equal uniform
    assert "--component must be one of" in _fails_cleanly(["schedule", "--component", "ffn"])
    assert "drop --heads" in _fails_cleanly(["schedule", "--preset", "tlm-tiny", "--heads", "2"])
    r = runner.invoke(app, ["schedule", "--component", "kv", "--preset", "tlm-440m", "--kv-heads", "8",
                            "--schedule", "cosine", "--json"])  # grouped-query attention beside a preset
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert sum(out["kv_heads"]) == 24 * 8 and out["parity"] is True and out["heads"] == [16] * 24


def test_train_with_heads_and_mlp_schedules_and_a_bad_spec(tmp_path):
    from tiny_flags import TINY

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"paragraph {i}: words {i * 7 % 13} twice" for i in range(200)))
    flags = [f for f in TINY]
    flags[flags.index("--layers") + 1], flags[flags.index("--heads") + 1] = "4", "4"
    args = ["train", "--data", str(corpus), "--schedule", "cosine:1.5:0.5", "--heads-schedule",
            "cosine:1.5:0.5", "--kv-heads", "2", *flags]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    cfg = load_tlm(tmp_path / "run").cfg
    mlp = make_schedule(parse_schedule("cosine:1.5:0.5", 16), 4, 64).widths
    assert cfg.layer_heads == (6, 4, 4, 2) and cfg.d_ff == mlp != (64,) * 4  # two components tapered at once
    bad = ["--heads-schedule", "cosine:1.5:0.5:3:4"]
    assert "takes at most" in _fails_cleanly([*args, *bad, "--out", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


def test_compare_budget_includes_heads_and_kv():
    from tlm_probe.train.arms import check_budget
    from tlm_probe.train.config import TrainConfig

    base = TrainConfig(steps=1, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=64, multiple_of=16)
    arms = ["uniform", "cosine:1.5:0.5", "heads=cosine:1.5:0.5", "kv=cosine:1.5:0.5",
            "mlp=cosine:1.5:0.5+heads=linear:1.5:0.5+kv=cosine:1.5:0.5"]
    budget = check_budget(base, arms, 256)
    assert len({(b["params"], b["flops_per_token"], b["kv_bytes_per_token"]) for b in budget.values()}) == 1
    assert budget["heads=cosine:1.5:0.5"]["heads"] == [6, 4, 4, 2]
    assert budget["kv=cosine:1.5:0.5"]["kv_heads"] == [4, 2, 1, 1]
    assert budget["uniform"]["kv_heads"] == [2] * 4 and budget["uniform"]["heads"] == [4] * 4


def test_heads_schedule_from_a_probe(tmp_path):
    from test_from_probe import _model, _probe

    model = _model(tmp_path / "m", [30.0, 30.0, 1e-6, 1e-6])  # the first two MLPs carry the signal
    probed = _probe(model, tmp_path / "p", max_tokens=300)
    out = tmp_path / "heads.json"
    args = ["schedule", "--component", "heads", "--from-probe", str(probed), "--statistic", "norm_ratio_mlp",
            "--heads", "8", "--kv-heads", "4", "--out", str(out), "--json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["values"] == json.loads(out.read_text())["widths"] and sum(got["values"]) == 4 * 8
    assert all(h % 2 == 0 for h in got["values"]) and got["kv_heads"] == [h // 2 for h in got["values"]]
    assert got["values"][0] > 8 > got["values"][3] and got["parity"] is True
    cfg = config_with_schedule("uniform", 64, heads=str(out), n_layers=4, d_model=64, n_heads=8, n_kv_heads=4)
    assert list(cfg.layer_heads) == got["values"]  # train/compare read the same file
    kv = _fails_cleanly([*args[:2], "kv", *args[3:-3], "--out", str(tmp_path / "kv.json")])
    assert "--component heads" in kv and not (tmp_path / "kv.json").exists()


def test_eval_of_a_head_tapered_checkpoint_equals_direct_log_likelihoods(tmp_path):
    """`tlm eval`'s harness path on a head-tapered model against a direct forward (tests/test_eval.py's
    float64 log-softmax of one unpadded sequence); the harness batches and pads, hence its 1e-4 bound."""
    from test_eval import _direct_ll

    from tlm_probe.eval.run import EvalOptions, run_eval
    from tlm_probe.tokenizer import ByteTokenizer

    torch.manual_seed(0)
    model = TaperedLM(_cfg(vocab_size=256, max_seq_len=512, init_scale=0.16)).eval()
    save_tlm(model, tmp_path / "m")
    ByteTokenizer().save(tmp_path / "m")
    res = run_eval(str(tmp_path / "m"), EvalOptions(tasks=["pydoc-mc"], limit=4, batch_size=3))
    for s in res.samples["pydoc-mc"]:
        doc = s["doc"]
        lls = np.array([_direct_ll(model, doc["context"], " " + c)[0] for c in doc["choices"]])
        np.testing.assert_allclose(np.array([r[0][0] for r in s["resps"]]), lls, rtol=1e-4, atol=1e-3)


def test_fsdp2_and_ddp_on_a_head_tapered_model_match_one_process(tmp_path):
    """torchrun + FSDP2 and torchrun + DDP (2 gloo processes, each half the batch) against one process:
    blocks of different attention widths shard, all-reduce and train alike (tests/test_train_ddp.py's
    pattern and bound)."""
    from test_train_ddp import CLI, COMMON, TORCHRUN, _max_diff, _run

    words = ["alpha", "beta", "gamma", "delta", "tapered", "uniform", "layer", "width", "depth", "token"]
    paragraphs = [f"{i}: " + " ".join(words[(i * 7 + j * j) % 10] for j in range(40)) for i in range(120)]
    text = "\n\n".join(paragraphs)
    (tmp_path / "corpus.txt").write_text(text)
    flags = [*COMMON, "--data", str(tmp_path / "corpus.txt")]
    flags[flags.index("--layers") + 1], flags[flags.index("--heads") + 1] = "4", "4"
    flags += ["--kv-heads", "2", "--heads-schedule", "cosine:1.5:0.5", "--kv-schedule", "cosine:1.5:0.5"]
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "one"), "--batch-size", "4", *flags])
    assert r.exit_code == 0, r.output
    _run([*TORCHRUN, CLI, "train", "--out", str(tmp_path / "fsdp"), "--batch-size", "2", "--fsdp", *flags])
    assert load_tlm(tmp_path / "fsdp").cfg.layer_kv_heads == (3, 2, 2, 1)
    assert _max_diff(tmp_path / "one", tmp_path / "fsdp") < 1e-5
    _run([*TORCHRUN, CLI, "train", "--out", str(tmp_path / "ddp"), "--batch-size", "2", *flags])
    assert _max_diff(tmp_path / "one", tmp_path / "ddp") < 1e-5


@pytest.mark.parametrize("mixer", ["attention", "gated_attention", "titans", "hope_attention"])
def test_every_mixer_trains_and_round_trips_with_tapered_heads(tmp_path, mixer):
    """Each mixer's attention takes its layer's heads; every block's query projection gets gradients of
    the size a uniform model's get (a dead, zero-signal component would be a bug), and the checkpoint
    reloads with equal logits."""
    from test_mixers import MIXER_KW

    def softmax_attention(block):  # Titans' MAL pair: its sliding-window attention
        return block.attn.swa if mixer == "titans" else block.attn

    def grads(cfg):
        torch.manual_seed(0)
        model = TaperedLM(cfg)
        model(torch.randint(0, 50, (2, 16)), return_type="loss").backward()
        w = [softmax_attention(b).W_Q.weight for b in model.blocks]
        return model, [p.grad.norm() / p.numel() ** 0.5 for p in w]

    kw = {**MIXER_KW[mixer], "max_seq_len": 40}
    model, tapered = grads(_cfg(**kw))
    _, uniform = grads(_cfg(**kw).replace(layer_heads=(), layer_kv_heads=()))
    swa = [softmax_attention(b) for b in model.blocks]
    assert [a.n_heads for a in swa] == [6, 4, 4, 2] and [a.kv_heads for a in swa] == [3, 2, 2, 1]
    for t, u in zip(tapered, uniform, strict=True):  # per-element RMS gradient within 10x of uniform's
        assert torch.isfinite(t) and u / 10 < t < u * 10, (t, u)
    model.eval()
    save_tlm(model, tmp_path / "m")
    x = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        assert torch.equal(load_tlm(tmp_path / "m")(x), model(x))


def test_memory_width_tapered_titans_equals_its_sequential_reference(monkeypatch, tmp_path):
    """Titans with per-layer memory widths (and tapered SWA heads): forward and every parameter gradient
    with the chunk-parallel memory against the token-by-token reference (tests/test_mixers.py's pattern
    and 1e-5 bound), then a checkpoint round trip with equal logits."""
    import tlm_probe.models.titans as titans_module
    from tlm_probe.models.memory import memory_chunked, memory_reference

    cfg = config_with_schedule("uniform", 64, heads="cosine:1.5:0.5", mem="cosine:1.5:0.5", vocab_size=50,
                               d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=40,
                               mixer="titans", window=6, mem_chunk=3, mem_persistent=2)
    widths = cfg.layer_mem_width  # mean 2·d_head = 16 exactly, multiples of 8, a taper
    assert sum(widths) == 4 * 16 and all(w % 8 == 0 for w in widths) and widths[0] > widths[-1]
    assert list(widths) == sorted(widths, reverse=True) and cfg.layer_heads == (6, 4, 4, 2)
    torch.manual_seed(0)
    model = TaperedLM(cfg)
    assert [tuple(b.attn.mem_W1.shape) for b in model.blocks] == [(4, w, 8) for w in cfg.layer_mem_width]
    x = torch.randint(0, 50, (2, 14))
    same_loss_and_grads(model, x, monkeypatch, titans_module, "memory_chunked",
                            (memory_chunked, memory_reference))
    assert all(b.attn.mem_W1.grad.abs().sum() > 0 for b in model.blocks)  # every layer's memory is live
    model.eval()
    save_tlm(model, tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(load_tlm(tmp_path / "m")(x), model(x))


def test_schedule_component_mem_for_titans_and_refused_elsewhere(tmp_path):
    arch = ["--layers", "6", "--d-model", "512", "--heads", "8", "--schedule", "cosine:1.5:0.5", "--json"]
    r = runner.invoke(app, ["schedule", "--component", "mem", "--mixer", "titans", *arch])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["uniform_value"] == 2 * 64 and sum(out["values"]) == 6 * 128 and out["parity"] is True
    assert all(v % 8 == 0 for v in out["values"]) and out["values"][0] > out["values"][-1]
    assert "mixer=attention has none" in _fails_cleanly(["schedule", "--component", "mem", *arch[:-1]])
    flags = ["train", "--out", str(tmp_path / "r"), "--mem-schedule", "cosine", "--steps", "1"]
    assert "mixer=attention has none" in _fails_cleanly(flags)  # before any data is read or written
    assert not (tmp_path / "r").exists()
