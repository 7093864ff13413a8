"""Byte-tokenizer run folders load with AutoTokenizer and nnsight.LanguageModel (issue 22): the ids are
ByteTokenizer's (UTF-8 bytes, NUL = eos = 0), both for new runs (tokenizer.json written at train time) and for
earlier runs that hold only tlm_tokenizer.json (AutoTokenizer's class for model_type "tlm", registered by
tlm_probe.register_with_transformers(), as the docs tell a user to call)."""

import warnings

import pytest
import torch
from transformers import AutoTokenizer

import tlm_probe
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import load_tlm, save_tlm
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.tokenizer import ByteTokenizer

tlm_probe.register_with_transformers()
EPS32 = 1.2e-7
TEXT = "Grüße aus Köln, 東京へ, Ελληνικά, ça va? 😀 <0xC3> <|endoftext|> Ā\x00tab\there\n"


def make_run(folder, kind: str):
    torch.manual_seed(0)
    cfg = TLMConfig(vocab_size=256, d_model=32, n_layers=2, n_heads=4, d_ff=(64, 32), max_seq_len=128)
    save_tlm(TaperedLM(cfg).eval(), folder)
    if kind == "new":
        ByteTokenizer().save(folder)  # what `tlm train` calls (train/run.py prepare_folder)
    else:  # a run written before tokenizer.json was saved for byte runs
        (folder / "tlm_tokenizer.json").write_text('{"kind": "byte"}\n')
    return folder


@pytest.mark.parametrize("kind", ["new", "old"])
def test_autotokenizer_ids_are_byte_ids(tmp_path, kind):
    run = make_run(tmp_path / kind, kind)
    tok = AutoTokenizer.from_pretrained(str(run))
    ours = ByteTokenizer()
    want = list(TEXT.encode("utf-8"))  # the independent reference: Python's UTF-8 encoder
    assert max(want) >= 128 and 0 in want
    assert ours.encode(TEXT).tolist() == want
    assert tok(TEXT)["input_ids"] == want  # add_special_tokens (the default) adds nothing
    assert tok(TEXT, add_special_tokens=False)["input_ids"] == want
    assert tok.decode(want) == TEXT
    assert (len(tok), tok.eos_token_id) == (ours.vocab_size, ours.eos_id)
    assert sorted(tok.get_vocab().values()) == list(range(256))


def test_run_without_any_tokenizer_is_not_given_bytes(tmp_path):
    run = tmp_path / "ids-only"
    make_run(run, "new")
    for name in ("tlm_tokenizer.json", "tokenizer.json", "tokenizer_config.json"):
        (run / name).unlink()
    with pytest.raises(OSError, match="no tokenizer files"):
        AutoTokenizer.from_pretrained(str(run))


def _nnsight_model(run, **kw):
    from nnsight import LanguageModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LanguageModel's deprecation notice
        return LanguageModel(str(run), **kw)


@pytest.mark.parametrize("kind", ["new", "old"])
def test_language_model_trace_equals_native_capture(tmp_path, kind):
    run = make_run(tmp_path / kind, kind)
    lm = _nnsight_model(run, tokenizer=AutoTokenizer.from_pretrained(str(run)))
    with torch.no_grad(), lm.trace(TEXT):
        traced = lm.blocks[1].mlp.output.save()
    model = load_tlm(run)  # our loader, a plain torch hook: the reference path
    got = {}
    model.blocks[1].mlp.register_forward_hook(lambda m, a, out: got.__setitem__("mlp", out))
    with torch.no_grad():
        model(torch.tensor([list(TEXT.encode("utf-8"))]))
    ref = got["mlp"]
    assert traced.shape == ref.shape == (1, len(TEXT.encode("utf-8")), 32)
    # the same float32 ops on the same weights; a different load path may only change kernel order
    assert torch.allclose(traced, ref, rtol=0, atol=8 * EPS32 * ref.abs().max().item())


def test_language_model_from_path_alone(tmp_path):
    """LanguageModel(RUN) with no tokenizer argument: nnsight 0.8.1 asks transformers' check_task for the
    pipeline class and reads its _load_tokenizer flag; transformers 5 returns the class as a dotted string,
    so nnsight sources no tokenizer for ANY model (a stock GPT-2 folder fails the same way)."""
    from transformers.pipelines import check_task

    run = make_run(tmp_path / "new", "new")
    if isinstance(check_task("text-generation")[1]["impl"], str):
        pytest.xfail("nnsight 0.8.1 with transformers 5: no tokenizer sourced from a path; pass tokenizer=")
    lm = _nnsight_model(run)
    assert lm.tokenizer(TEXT)["input_ids"] == list(TEXT.encode("utf-8"))
