"""Generation: KV-cached greedy decoding gives the same tokens as uncached decoding and as a plain argmax
loop over the model's full forward; sampling is seeded; `tlm generate`."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.hf import TLMForCausalLM, TLMHFConfig
from tlm_probe.models.tlm import TaperedLM

PROMPT = [[7, 1, 8, 8, 11, 3]]


def _model(mixer: str = "attention", positions: str = "rope") -> TLMForCausalLM:
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=(96, 32),
                    max_seq_len=64, init_scale=0.3, mixer=mixer, positions=positions)
    return TLMForCausalLM(TLMHFConfig(**cfg.to_dict())).eval()


def _argmax_loop(model, ids: list[int], n: int) -> list[int]:
    """Greedy decoding by re-running TaperedLM.forward on the whole sequence each step (no cache)."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(TaperedLM.forward(model, torch.tensor([ids]))[0, -1].argmax()))
    return ids


@pytest.mark.parametrize("mixer, positions", [("attention", "rope"), ("gated_attention", "learned")])
def test_cached_greedy_equals_uncached_and_argmax_loop(mixer, positions):
    model = _model(mixer, positions)
    x = torch.tensor(PROMPT)
    lengths = []
    hook = model.embed.register_forward_hook(lambda m, inp, out: lengths.append(inp[0].shape[1]))
    cached = model.generate(x, max_new_tokens=16, do_sample=False, use_cache=True, pad_token_id=0)
    hook.remove()
    uncached = model.generate(x, max_new_tokens=16, do_sample=False, use_cache=False, pad_token_id=0)
    assert lengths[0] == x.shape[1] and set(lengths[1:]) == {1}  # the cache was used: one new id per step
    assert cached.tolist() == uncached.tolist()
    assert cached[0].tolist() == _argmax_loop(model, PROMPT[0], 16)
    assert len(set(cached[0, 6:].tolist())) > 3, "degenerate model: the test would not see a difference"


def test_cached_greedy_with_left_padding():
    model = _model()
    x = torch.tensor([[0, 0, 7, 1, 8], [7, 1, 8, 8, 11]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    cached = model.generate(x, use_cache=True, **kw)
    assert cached.tolist() == model.generate(x, use_cache=False, **kw).tolist()
    assert cached[0, 2:].tolist() == _argmax_loop(model, [7, 1, 8], 12)  # padding changes nothing


def test_cache_leaves_the_plain_forward_unchanged():
    """Logits of the cached last step equal the full forward's last position."""
    from transformers.cache_utils import DynamicCache

    model = _model()
    ids = torch.tensor([[5, 9, 2, 7, 1, 4, 4, 3]])
    full = TaperedLM.forward(model, ids)
    cache = DynamicCache()
    TaperedLM.forward(model, ids[:, :-3], past_key_values=cache)
    step = TaperedLM.forward(model, ids[:, -3:], past_key_values=cache)
    torch.testing.assert_close(step, full[:, -3:], rtol=1e-5, atol=1e-5)


def test_sampling_is_seeded(tmp_path):
    from tlm_probe.generation import GenerateOptions, generate_ids

    model = _model()
    opts = GenerateOptions(max_new_tokens=16, temperature=1.0, top_p=0.9, seed=3)
    a = generate_ids(model, PROMPT[0], opts, eos_id=49, context=64)
    assert a == generate_ids(model, PROMPT[0], opts, eos_id=49, context=64)
    draws = [GenerateOptions(max_new_tokens=16, temperature=1.0, top_p=0.9, seed=seed) for seed in range(4)]
    others = {tuple(generate_ids(model, PROMPT[0], o, 49, 64)) for o in draws}
    assert len(others) > 1


def test_cli_generate(tmp_path):
    from cli import app
    from tlm_probe.tokenizer import ByteTokenizer

    folder = tmp_path / "run"
    torch.manual_seed(0)
    byte_model = TLMForCausalLM(TLMHFConfig(**TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(64, 64),
                                                        max_seq_len=32).to_dict()))
    byte_model.save_pretrained(folder)
    ByteTokenizer().save(folder)
    runner = CliRunner()
    args = ["generate", str(folder), "--prompt", "def ", "--max-new-tokens", "50", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # 32-token context: the window slides past it (tests/test_cli_habits.py), so all 50 ids (or up to an eos)
    assert len(doc["ids"]) == doc["new_tokens"] and (doc["new_tokens"] == 50 or doc["ids"][-1] == 0)
    assert doc["completion"] == ByteTokenizer().decode(doc["ids"])
    bad = runner.invoke(app, ["generate", str(folder), "--prompt", "x", "--top-p", "0"])
    assert bad.exit_code == 1 and "--top-p" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_generate_options_are_the_cli_options_and_bad_values_are_one_line(tmp_path):
    """Issue 32: `tlm generate`'s options are GenerateOptions' fields; issue 36: --seed -1 and an absurd
    --max-new-tokens are refused in one `error:` line before anything is loaded; --no-cache still works."""
    import typer.main

    from cli import app
    from tlm_probe.commands.options import cli_fields
    from tlm_probe.generation import MAX_NEW_TOKENS, GenerateOptions

    params = {p.name: p for p in typer.main.get_group(app).commands["generate"].params}
    for f in cli_fields(GenerateOptions):
        assert params[f.name].default == f.default, f.name
    assert params["device"].default == "auto" and "--no-cache" in params["cache"].secondary_opts
    assert GenerateOptions(use_cache=False).cache is False  # the library's old keyword
    runner = CliRunner()
    too_many = f"--max-new-tokens must be an integer in [1, {MAX_NEW_TOKENS}]"  # its stated range (ranges.py)
    for args, needle in ((["--seed", "-1"], "--seed must be an integer in [0, 4294967295]"),
                         (["--seed", str(2**32)], "--seed must be an integer"),
                         (["--max-new-tokens", str(MAX_NEW_TOKENS + 1)], too_many),
                         (["--max-new-tokens", "0"], too_many),
                         (["--temperature", "nan"], "--temperature must be a number in [0.0, 100.0]")):
        res = runner.invoke(app, ["generate", str(tmp_path / "absent"), "--prompt", "x", *args])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (args, res.output)
        assert needle in lines[0], lines
    from tlm_probe.tokenizer import ByteTokenizer

    torch.manual_seed(0)
    folder = tmp_path / "run"
    TLMForCausalLM(TLMHFConfig(**TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(64, 64),
                                           max_seq_len=32).to_dict())).save_pretrained(folder)
    ByteTokenizer().save(folder)
    base = ["generate", str(folder), "--prompt", "def ", "--max-new-tokens", "8", "--json"]
    cached, uncached = (runner.invoke(app, base + extra) for extra in ([], ["--no-cache"]))
    assert cached.exit_code == 0 and uncached.exit_code == 0, (cached.output, uncached.output)
    assert json.loads(cached.stdout)["ids"] == json.loads(uncached.stdout)["ids"]


def test_importing_the_hf_module_first_registers_the_auto_classes():
    """Regression: `import tlm_probe.models.hf` as the first import was a circular ImportError."""
    import subprocess
    import sys

    code = "import tlm_probe.models.hf as m, transformers as t; print(t.AutoConfig.for_model('tlm').n_layers)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.strip() == "4"


@pytest.mark.parametrize("mixer", ["titans", "hope_attention"])
def test_generate_with_the_memory_mixers(mixer):
    """Titans' memory and Hope-attention's in-context CMS levels are recurrences over the prefix, so
    generate() feeds them the whole prefix every step (no cache) and still equals the argmax loop."""
    model = _model(mixer)
    x = torch.tensor(PROMPT)
    lengths = []
    hook = model.embed.register_forward_hook(lambda m, inp, out: lengths.append(inp[0].shape[1]))
    cached = model.generate(x, max_new_tokens=8, do_sample=False, use_cache=True, pad_token_id=0)
    hook.remove()
    uncached = model.generate(x, max_new_tokens=8, do_sample=False, use_cache=False, pad_token_id=0)
    assert cached.tolist() == uncached.tolist() and cached[0].tolist() == _argmax_loop(model, PROMPT[0], 8)
    steps = set(lengths[1:])
    assert steps == set(range(x.shape[1] + 1, x.shape[1] + 8))


def test_a_model_without_a_tokenizer_is_refused_naming_generate(tmp_path):
    """The refusal names the command that was run (it said `tlm eval` before; issue 35 item 6)."""
    from typer.testing import CliRunner

    from cli import app
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM

    cfg = TLMConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_ff=(64,))
    save_tlm(TaperedLM(cfg), tmp_path / "m")
    res = CliRunner().invoke(app, ["generate", str(tmp_path / "m"), "--prompt", "x", "--max-new-tokens", "1"])
    assert res.exit_code == 1 and "tlm generate needs one" in res.output and "tlm eval" not in res.output
