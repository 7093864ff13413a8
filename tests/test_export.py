"""`tlm export`: GGUF (read back with gguf.GGUFReader; Q/K un-permuted with transformers' own inverse of
llama.cpp's permute; a uniform file loaded by transformers' GGUF loader and by our probe) and a stock
Hugging Face Llama folder (loaded with AutoModelForCausalLM); refusals and bad input leave nothing.

Bounds: two float64 forwards of the same weights through different code differ only by reassociation:
per layer, sums of at most d_model + T + d_ff terms, each rounded at relative eps, times 16 for the
compounding over norm/softmax rescaling, times the logits' scale (hf_llama.logits_bound states the same;
here it is recomputed, not imported). A wrong RoPE permutation, width or tie gives O(scale) errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cli import app
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.io import save_tlm
from tlm_probe.models.tlm import TaperedLM

TEXT = ("the quick brown fox jumps over the lazy dog. a tapered model makes its late MLPs narrower. "
        "def add(a, b):\n    return a + b\n") * 20


def _bound(cfg, scale, T, eps):
    return 16 * eps * (cfg.d_model + T + max(cfg.d_ff)) * cfg.n_layers * max(1.0, scale)


def _model(**kw) -> TaperedLM:
    base = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=(96, 64, 32),
                max_seq_len=32)
    torch.manual_seed(0)
    model = TaperedLM(TLMConfig(**(base | kw))).eval()
    with torch.no_grad():  # larger than the init's 0.02 so attention and rotary matter to the logits
        for p in model.parameters():
            p.normal_(0.0, 0.3) if p.ndim > 1 else p.uniform_(0.5, 1.5)
    return model


def _checkpoint(tmp_path, tokenizer: str | None = None, **kw):
    """A checkpoint folder (+ tokenizer files): 'bpe' trains tlm's byte-level BPE on TEXT."""
    from tlm_probe.tokenizer import ByteTokenizer, train_bpe

    tok = train_bpe([TEXT], vocab_size=300) if tokenizer == "bpe" else ByteTokenizer() if tokenizer else None
    if tok is not None:
        kw.setdefault("vocab_size", tok.vocab_size)
    model = _model(**kw)
    folder = save_tlm(model, tmp_path / "ck")
    if tok is not None:
        tok.save(folder)
    return model, tok, folder


def _cli(*args):
    return CliRunner().invoke(app, ["export", *map(str, args)])


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """transformers' inverse of llama.cpp's Q/K permute (its GGUF loader), not our writer's code."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    return LlamaTensorProcessor()._reverse_permute_weights(w, n_head, n_head)


def _read(path):
    from gguf import GGUFReader

    reader = GGUFReader(path)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    return {t.name: np.array(t.data) for t in reader.tensors}, fields


OURS = {"ln1.weight": "attn_norm", "attn.W_Q.weight": "attn_q", "attn.W_K.weight": "attn_k",
        "attn.W_V.weight": "attn_v", "attn.W_O.weight": "attn_output", "ln2.weight": "ffn_norm",
        "mlp.W_gate.weight": "ffn_gate", "mlp.W_in.weight": "ffn_up", "mlp.W_out.weight": "ffn_down"}


def test_gguf_of_a_tapered_model_reads_back_to_identical_tensors_and_per_layer_arrays(tmp_path):
    model, _, folder = _checkpoint(tmp_path, tie_embeddings=False)
    out = tmp_path / "m.gguf"
    r = _cli(folder, "--gguf", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    tensors, meta = _read(out)
    cfg = model.cfg
    # the widths vary: llama.cpp's "deci" sizes each block by its own entry of the arrays
    assert meta["general.architecture"] == "deci"
    assert list(meta["deci.feed_forward_length"]) == [96, 64, 32]
    assert meta["deci.attention.head_count"] == 4 and meta["deci.attention.head_count_kv"] == 2  # uniform
    assert meta["deci.attention.key_length"] == meta["deci.rope.dimension_count"] == cfg.d_head
    dims = (meta["deci.block_count"], meta["deci.embedding_length"], meta["deci.context_length"])
    assert dims == (3, 32, 32)
    assert meta["deci.rope.freq_base"] == np.float32(cfg.rope_theta)
    assert meta["deci.attention.layer_norm_rms_epsilon"] == np.float32(cfg.norm_eps)
    assert json.loads(meta["tlm_probe.config"]) == json.loads(json.dumps(cfg.to_dict()))
    assert "no tokenizer included" in meta["tlm_probe.tokenizer_note"]
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    want = {"token_embd.weight": sd["embed.weight"], "output_norm.weight": sd["ln_final.norm.weight"],
            "output.weight": sd["unembed.weight"]}
    for l in range(cfg.n_layers):
        for ours, theirs in OURS.items():
            want[f"blk.{l}.{theirs}.weight"] = sd[f"blocks.{l}.{ours}"]
    assert set(tensors) == set(want)
    for name, w in want.items():
        got = tensors[name]
        if name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = cfg.n_heads if "attn_q" in name else cfg.kv_heads
            assert not np.array_equal(got, w)  # permuted in the file (llama.cpp's adjacent-pair RoPE)
            got = _unpermute(got, heads)
        assert got.dtype == np.float32 and np.array_equal(got, w), name


def test_gguf_tensors_rebuild_the_model_with_equal_logits(tmp_path):
    """An independent reader: config from the file's metadata only, weights un-permuted, into a fresh
    TaperedLM. Same weights, same code, same process: the logits are bit-equal."""
    model, _, folder = _checkpoint(tmp_path)
    out = tmp_path / "m.gguf"
    assert _cli(folder, "--gguf", "--out", out).exit_code == 0
    tensors, meta = _read(out)
    a = meta["general.architecture"]
    cfg = TLMConfig(vocab_size=int(meta[f"{a}.vocab_size"]), d_model=int(meta[f"{a}.embedding_length"]),
                    n_layers=int(meta[f"{a}.block_count"]), n_heads=int(meta[f"{a}.attention.head_count"]),
                    n_kv_heads=int(meta[f"{a}.attention.head_count_kv"]),
                    d_ff=tuple(int(x) for x in meta[f"{a}.feed_forward_length"]),
                    max_seq_len=int(meta[f"{a}.context_length"]),
                    tie_embeddings="output.weight" not in tensors)
    sd = {"embed.weight": tensors["token_embd.weight"], "ln_final.norm.weight": tensors["output_norm.weight"]}
    for l in range(cfg.n_layers):
        for ours, theirs in OURS.items():
            w = tensors[f"blk.{l}.{theirs}.weight"]
            heads = {"attn_q": cfg.n_heads, "attn_k": cfg.kv_heads}.get(theirs)
            sd[f"blocks.{l}.{ours}"] = _unpermute(w, heads) if heads else w
    rebuilt = TaperedLM(cfg).eval()
    weights = {k: torch.from_numpy(v) for k, v in sd.items()}
    missing, unexpected = rebuilt.load_state_dict(weights, strict=False)
    assert missing == ["unembed.weight"] and not unexpected  # tied to embed.weight
    ids = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(rebuilt(ids), model(ids))


def test_uniform_gguf_loads_in_transformers_and_the_probe_with_our_logits_and_tokens(tmp_path):
    from tlm_probe.api.library import probe
    from tlm_probe.capture.gguf import load_gguf

    model, tok, folder = _checkpoint(tmp_path, "bpe", d_ff=(64, 64, 64))
    out = tmp_path / "u.gguf"
    r = _cli(folder, "--gguf", "--out", out)
    assert r.exit_code == 0, r.output
    assert "arch llama" in r.output and "tokenizer included" in r.output
    hf, hf_tok = load_gguf(out, torch.float64)
    assert hf.config.model_type == "llama" and hf.config.tie_word_embeddings
    assert hf_tok(TEXT[:200], add_special_tokens=False)["input_ids"] == tok.encode(TEXT[:200]).tolist()
    ids = torch.tensor([tok.encode(TEXT[:120]).tolist()[:24]])
    ours = TaperedLM(model.cfg)
    ours.load_state_dict(model.state_dict())
    with torch.no_grad():
        want = ours.double().eval()(ids)
        got = hf(input_ids=ids).logits
    bound = _bound(model.cfg, float(want.abs().max()), ids.shape[1], torch.finfo(torch.float64).eps)
    assert float((want - got).abs().max()) <= bound

    # the probe reads the file (float32) and the checkpoint: the same statistics. Its activations differ
    # by float32 reassociation, relative eps32 x (d + T + d_ff) x L x 16 (as above); cosines are <= 1
    opts = dict(data=str(_corpus(tmp_path)), max_tokens=96, seq_len=16, batch_size=2, stats="alignment")
    from_gguf, from_ck = probe(str(out), **opts), probe(str(folder), **opts)
    assert len(from_gguf) == len(from_ck) > 0
    tol = 16 * 1.2e-7 * (32 + 16 + 64) * 3
    np.testing.assert_allclose(from_gguf["value"], from_ck["value"], rtol=0, atol=tol)


def _corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    return path


def test_hf_llama_folder_loads_with_auto_and_gives_our_logits(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok, folder = _checkpoint(tmp_path, "bpe", d_ff=(64, 64, 64), tie_embeddings=False)
    out = tmp_path / "llama"
    r = _cli(folder, "--hf-llama", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float64).eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    assert AutoTokenizer.from_pretrained(str(out))(TEXT[:100])["input_ids"] == tok.encode(TEXT[:100]).tolist()
    ids = torch.randint(0, model.cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(2))
    ours = TaperedLM(model.cfg)
    ours.load_state_dict(model.state_dict())
    with torch.no_grad():
        want, got = ours.double().eval()(ids), hf(input_ids=ids).logits
    assert float((want - got).abs().max()) <= _bound(model.cfg, float(want.abs().max()), 20, 2.2e-16)
    assert float((want - got).abs().max()) < 1e-3 * float(want.abs().max())  # not vacuous
    # an export folder is ours: a second export needs --overwrite, then replaces it
    assert _cli(folder, "--hf-llama", "--out", out).exit_code == 1
    assert _cli(folder, "--hf-llama", "--out", out, "--overwrite").exit_code == 0


def test_hf_llama_of_a_tapered_model_is_refused_or_exact_per_installed_transformers(tmp_path):
    import transformers

    from tlm_probe.export.hf_llama import per_layer_problem

    model, _, folder = _checkpoint(tmp_path)  # d_ff = (96, 64, 32)
    out = tmp_path / "llama"
    r = _cli(folder, "--hf-llama", "--out", out)
    if per_layer_problem("d_ff"):  # transformers 5.24: AmbiguousGlobalPerLayerAttributeError
        assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
        assert f"transformers {transformers.__version__}" in r.output and "intermediate_size" in r.output
        assert not out.exists() and not list(tmp_path.glob(".llama*"))
    else:  # a transformers that honours per_layer_config: the export is verified like a uniform one
        assert r.exit_code == 0, r.output


REFUSED = {
    "gelu": (dict(mlp="gelu"), "SwiGLU"),
    "layernorm": (dict(norm="layernorm"), "RMSNorm"),
    "learned": (dict(positions="learned"), "rotary"),
    "gated": (dict(mixer="gated_attention"), "gated_attention"),
    "titans": (dict(mixer="titans"), "titans"),
    "no-mlp": (dict(d_ff=(128, 0, 64)), "block 1 has no MLP"),
}


@pytest.mark.parametrize("fmt", ["--gguf", "--hf-llama"])
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_models_without_a_stock_equivalent_are_refused_in_one_line(tmp_path, case, fmt):
    kw, needle = REFUSED[case]
    _, _, folder = _checkpoint(tmp_path, **kw)
    out = tmp_path / ("m.gguf" if fmt == "--gguf" else "llama")
    r = _cli(folder, fmt, "--out", out)
    assert r.exit_code == 1 and r.output.startswith("error: cannot export") and needle in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # nothing written, no lock or temp left


def test_bad_input_is_one_line_and_leaves_everything_as_it_was(tmp_path):
    _, _, folder = _checkpoint(tmp_path, d_ff=(64, 64, 64))  # uniform: --hf-llama may write it
    foreign = tmp_path / "theirs.gguf"
    foreign.write_bytes(b"GGUF not really")
    (tmp_path / "dir.gguf").mkdir()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    cases = {
        "nowhere": ([tmp_path / "nope", "--gguf", "--out", tmp_path / "a.gguf"], "not found"),
        "not a checkpoint": ([tmp_path / "busy", "--gguf", "--out", tmp_path / "a.gguf"], "no config.json"),
        "suffix": ([folder, "--gguf", "--out", tmp_path / "a.bin"], ".gguf"),
        "no parent": ([folder, "--gguf", "--out", tmp_path / "x" / "a.gguf"], "does not exist"),
        "foreign file": ([folder, "--gguf", "--out", foreign, "--overwrite"], "did not write it"),
        "a folder": ([folder, "--gguf", "--out", tmp_path / "dir.gguf"], "not a regular file"),
        "inside input": ([folder, "--gguf", "--out", folder / "m.gguf"], "apart from the inputs"),
        "both": ([folder, "--gguf", "--hf-llama", "--out", tmp_path / "a.gguf"], "exactly one"),
        "neither": ([folder, "--out", tmp_path / "a.gguf"], "exactly one"),
        "foreign folder": ([folder, "--hf-llama", "--out", tmp_path / "busy"], "tlm did not write it"),
    }
    before = _snapshot(tmp_path)
    for name, (args, needle) in cases.items():
        r = _cli(*args)
        assert r.exit_code == 1 and r.output.startswith("error: ") and needle in r.output, (name, r.output)
        assert len(r.output.strip().splitlines()) == 1, name
        assert _snapshot(tmp_path) == before, name


def test_gguf_overwrite_replaces_only_an_export_and_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    from tlm_probe.errors import UserError
    from tlm_probe.export import gguf_writer

    _, _, folder = _checkpoint(tmp_path)
    out = tmp_path / "m.gguf"
    assert _cli(folder, "--gguf", "--out", out).exit_code == 0
    first = out.read_bytes()
    r = _cli(folder, "--gguf", "--out", out)
    assert r.exit_code == 1 and "--overwrite" in r.output
    assert _cli(folder, "--gguf", "--out", out, "--overwrite").exit_code == 0
    assert out.read_bytes() == first  # deterministic

    def broken(*a, **k):
        raise UserError("GGUF read-back differs (simulated)")

    monkeypatch.setattr(gguf_writer, "verify_gguf", broken)
    r = _cli(folder, "--gguf", "--out", tmp_path / "new.gguf")
    assert r.exit_code == 1 and "simulated" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "m.gguf"]  # no file, temp or lock


def test_byte_tokenizer_is_stated_not_included(tmp_path):
    _, _, folder = _checkpoint(tmp_path, "byte", vocab_size=256)
    r = _cli(folder, "--gguf", "--out", tmp_path / "b.gguf", "--json")
    assert r.exit_code == 0, r.output
    assert "no tokenizer included: the byte-level tokenizer" in json.loads(r.stdout)["tokenizer"]
    _, meta = _read(tmp_path / "b.gguf")
    assert not any(k.startswith("tokenizer.") for k in meta)


def test_per_layer_heads_become_arrays_and_k_is_permuted_by_its_own_layers_kv_heads():
    """A config with 4/2/2 query heads and 2/2/1 KV heads: per-layer arrays, and each layer's K permuted
    by its own KV head count (undone here with transformers' inverse)."""
    from tlm_probe.export.gguf_writer import gguf_metadata, gguf_tensors
    from tlm_probe.export.support import LayerShapes, layer_heads, layer_kv_heads
    from tlm_probe.models.config import TLMConfig

    d, dh, heads, kv = 16, 4, (4, 2, 2), (2, 2, 1)
    cfg = TLMConfig(n_layers=3, n_heads=4, n_kv_heads=2, layer_heads=heads, layer_kv_heads=kv,
                    d_ff=(32, 32, 32), max_seq_len=8, d_model=d, vocab_size=8)
    assert cfg.d_head == dh and cfg.tie_embeddings
    shapes = LayerShapes(cfg.d_ff, layer_heads(cfg), layer_kv_heads(cfg), dh)
    assert not shapes.uniform
    g = torch.Generator().manual_seed(0)
    state = {"embed.weight": torch.randn(8, d, generator=g), "ln_final.norm.weight": torch.ones(d)}
    for l in range(3):
        shape = {"attn.W_Q.weight": (heads[l] * dh, d), "attn.W_K.weight": (kv[l] * dh, d),
                 "attn.W_V.weight": (kv[l] * dh, d), "attn.W_O.weight": (d, heads[l] * dh),
                 "mlp.W_gate.weight": (32, d), "mlp.W_in.weight": (32, d), "mlp.W_out.weight": (d, 32),
                 "ln1.weight": (d,), "ln2.weight": (d,)}
        for name in OURS:
            state[f"blocks.{l}.{name}"] = torch.randn(*shape[name], generator=g)
    meta = gguf_metadata(cfg, shapes, "deci", "x")
    assert meta["deci.attention.head_count"] == [4, 2, 2]
    assert meta["deci.attention.head_count_kv"] == [2, 2, 1]
    assert meta["deci.feed_forward_length"] == 32
    tensors = gguf_tensors(state, cfg, shapes)
    for l in range(3):
        assert np.array_equal(_unpermute(tensors[f"blk.{l}.attn_q.weight"], heads[l]),
                              state[f"blocks.{l}.attn.W_Q.weight"].numpy())
        assert np.array_equal(_unpermute(tensors[f"blk.{l}.attn_k.weight"], kv[l]),
                              state[f"blocks.{l}.attn.W_K.weight"].numpy())


def _snapshot(root):
    return sorted((str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"")
                  for p in root.rglob("*"))


def test_export_is_in_the_help():
    r = CliRunner().invoke(app, ["export", "--help"])
    assert r.exit_code == 0 and "Example: tlm export" in r.output


def test_export_options_come_from_one_dataclass():
    """Issue 32: `tlm export`'s options are ExportRun's fields; exactly one format, refused when made."""
    import typer.main

    from tlm_probe.commands.export import ExportRun
    from tlm_probe.commands.options import cli_fields
    from tlm_probe.errors import UserError

    params = {p.name: p for p in typer.main.get_group(app).commands["export"].params}
    assert {f.name for f in cli_fields(ExportRun)} == set(params) - {"checkpoint"}
    assert params["out"].required and "-o" in params["out"].opts and "--json" in params["json_out"].opts
    for both in (False, True):
        with pytest.raises(UserError, match="exactly one of --gguf and --hf-llama"):
            ExportRun(gguf=both, hf_llama=both, out="x.gguf")
