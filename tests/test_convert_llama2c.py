"""`tlm convert llama2c`: a random llama2.c checkpoint and tokenizer written here, converted, and the
Hugging Face folder's logits checked against a numpy transcription of run.c's forward (adjacent-pair RoPE,
GQA, RMSNorm eps 1e-5, SwiGLU, one position at a time with a KV cache), its token ids against run.c's
BPE encoder transcribed below."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from typer.testing import CliRunner

from tlm_probe.cli import app

runner = CliRunner()


def write_bin(path, dim=16, hidden=24, layers=2, heads=4, kv_heads=2, vocab=300, seq=32, shared=True, seed=0):
    """A legacy llama2.c export with random weights; returns the tensors by run.c's names."""
    rng = np.random.default_rng(seed)
    hs, kv = dim // heads, kv_heads * dim // heads
    shapes = [("emb", (vocab, dim)), ("rms_att", (layers, dim)), ("wq", (layers, dim, dim)),
              ("wk", (layers, kv, dim)), ("wv", (layers, kv, dim)), ("wo", (layers, dim, dim)),
              ("rms_ffn", (layers, dim)), ("w1", (layers, hidden, dim)), ("w2", (layers, dim, hidden)),
              ("w3", (layers, hidden, dim)), ("rms_final", (dim,)), ("fr", (seq, hs // 2)),
              ("fi", (seq, hs // 2))]
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    w = {}
    for name, shape in shapes:
        scale = 1.0 if name.startswith("rms") else 0.3
        w[name] = (1.0 + 0.2 * rng.standard_normal(shape) if name.startswith("rms")
                   else scale * rng.standard_normal(shape)).astype(np.float32)
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab if shared else -vocab, seq))
        for name, _ in shapes:
            f.write(w[name].tobytes())
    w.setdefault("wcls", w["emb"])
    return w, dict(dim=dim, layers=layers, heads=heads, kv_heads=kv_heads)


def rmsnorm(x, g):
    return g * x / np.sqrt(np.mean(x * x) + 1e-5)


def run_c_forward(w, c, tokens):
    """run.c's `forward`, position by position, in float64: (T, vocab) logits."""
    dim, heads, kvh = c["dim"], c["heads"], c["kv_heads"]
    hs = dim // heads
    kdim = kvh * hs
    w = {k: v.astype(np.float64) for k, v in w.items()}
    kc = np.zeros((c["layers"], len(tokens), kdim))
    vc = np.zeros_like(kc)
    out = []
    for pos, tok in enumerate(tokens):
        x = w["emb"][tok].copy()
        for l in range(c["layers"]):
            xb = rmsnorm(x, w["rms_att"][l])
            q, k, v = w["wq"][l] @ xb, w["wk"][l] @ xb, w["wv"][l] @ xb
            for i in range(0, dim, 2):
                freq = 1.0 / 10000.0 ** ((i % hs) / hs)
                cr, ci = np.cos(pos * freq), np.sin(pos * freq)
                for vec in ((q, k) if i < kdim else (q,)):
                    v0, v1 = vec[i], vec[i + 1]
                    vec[i], vec[i + 1] = v0 * cr - v1 * ci, v0 * ci + v1 * cr
            kc[l, pos], vc[l, pos] = k, v
            att_out = np.zeros(dim)
            for h in range(heads):
                g = h // (heads // kvh)
                qh = q[h * hs:(h + 1) * hs]
                s = np.array([qh @ kc[l, t, g * hs:(g + 1) * hs] for t in range(pos + 1)]) / np.sqrt(hs)
                a = np.exp(s - s.max())
                a /= a.sum()
                att_out[h * hs:(h + 1) * hs] = a @ vc[l, :pos + 1, g * hs:(g + 1) * hs]
            x = x + w["wo"][l] @ att_out
            xb = rmsnorm(x, w["rms_ffn"][l])
            h1, h3 = w["w1"][l] @ xb, w["w3"][l] @ xb
            x = x + w["w2"][l] @ (h1 / (1 + np.exp(-h1)) * h3)
        out.append(w["wcls"] @ rmsnorm(x, w["rms_final"]))
    return np.array(out)


PIECES = [(" ", -1.0), ("a", -2.0), ("b", -3.0), ("c", -4.0), (" a", -5.0), ("ab", -6.0), (" ab", -7.0),
          ("abc", -8.0), ("ba", -9.0), ("é", -10.0)]


def write_tok_bin(path):
    """A tok*.bin as llama2.c's export writes one: <unk>, BOS, EOS, 256 byte pieces, then merges."""
    tokens = [("<unk>", 0.0), ("\n<s>\n", 0.0), ("\n</s>\n", 0.0)]
    tokens += [(f"<0x{b:02X}>", 0.0) for b in range(256)] + PIECES
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(t.encode()) for t, _ in tokens)))
        for text, score in tokens:
            raw = text.encode()
            f.write(struct.pack("<fi", score, len(raw)) + raw)
    return tokens


def run_c_encode(tokens, text):
    """run.c's `encode` (bos=1, eos=0): dummy prefix, code points looked up or byte fallback, then the
    best-scoring adjacent merge, repeatedly."""
    lookup = {t: i for i, (t, _) in enumerate(tokens)}
    ids = [lookup[" "]]
    for ch in text:
        ids += [lookup[ch]] if ch in lookup else [b + 3 for b in ch.encode()]
    while True:
        pairs = [(tokens[a][0] + tokens[b][0], i) for i, (a, b) in enumerate(zip(ids, ids[1:], strict=False))]
        best = max(((tokens[lookup[p]][1], i) for p, i in pairs if p in lookup), default=None)
        if best is None:
            return [1] + ids
        i = best[1]
        ids[i:i + 2] = [lookup[tokens[ids[i]][0] + tokens[ids[i + 1]][0]]]


@pytest.mark.parametrize("shared", [True, False])
def test_converted_logits_equal_run_c(tmp_path, shared):
    import torch
    from transformers import AutoModelForCausalLM

    tokens = write_tok_bin(tmp_path / "tok.bin")
    w, c = write_bin(tmp_path / "model.bin", vocab=len(tokens), shared=shared, seed=int(shared))
    res = runner.invoke(app, ["convert", "llama2c", str(tmp_path / "model.bin"), "--tokenizer",
                              str(tmp_path / "tok.bin"), "--out", str(tmp_path / "hf"), "--json"])
    assert res.exit_code == 0, res.output
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float64).eval()
    ids = [1, 260, 7, 268, 45, 2, 266, 100, 3, 259, 261, 11]
    with torch.no_grad():
        got = model(torch.tensor([ids])).logits[0].numpy()
    want = run_c_forward(w, c, ids)
    # float64 arithmetic on both sides, except that transformers computes the RoPE angles pos * freq and
    # their cos/sin in float32 (relative error eps32 each, so up to pos * eps32 absolute in cos/sin, carried
    # to the logits with a gain of order their scale; 16 for the layers and heads it passes through); a wrong
    # pair layout or a missed permutation moves the logits by O(1)
    bound = 16 * len(ids) * np.finfo(np.float32).eps * max(1.0, np.abs(want).max())
    assert np.abs(got - want).max() <= bound
    assert np.abs(want).max() > 1.0  # the logits carry signal, not a degenerate zero model


def test_converted_tokenizer_encodes_as_run_c(tmp_path):
    from transformers import AutoTokenizer

    tokens = write_tok_bin(tmp_path / "tok.bin")
    write_bin(tmp_path / "model.bin", vocab=len(tokens))
    res = runner.invoke(app, ["convert", "llama2c", str(tmp_path / "model.bin"), "--tokenizer",
                              str(tmp_path / "tok.bin"), "--out", str(tmp_path / "hf")])
    assert res.exit_code == 0, res.output
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    for text in ["ab", "abc ab ba", "cab a\nb", "é x Z!", "bbb abab"]:
        assert tok(text)["input_ids"] == run_c_encode(tokens, text), text


def test_refusals_are_one_line(tmp_path):
    tokens = write_tok_bin(tmp_path / "tok.bin")
    write_bin(tmp_path / "model.bin", vocab=len(tokens))
    cut = tmp_path / "cut.bin"
    cut.write_bytes((tmp_path / "model.bin").read_bytes()[:-4])
    wrong = tmp_path / "wrong.bin"
    write_bin(wrong, vocab=len(tokens) + 1)
    for model, why in [(cut, "needs"), (wrong, "do not belong together")]:
        res = runner.invoke(app, ["convert", "llama2c", str(model), "--tokenizer", str(tmp_path / "tok.bin"),
                                  "--out", str(tmp_path / "out")])
        assert res.exit_code == 1 and why in res.output and "Traceback" not in res.output, res.output
        assert not (tmp_path / "out").exists()


def test_tlm_probe_reads_the_converted_folder(tmp_path):
    from tlm_probe.api.library import probe

    tokens = write_tok_bin(tmp_path / "tok.bin")
    write_bin(tmp_path / "model.bin", vocab=len(tokens), layers=3)
    res = runner.invoke(app, ["convert", "llama2c", str(tmp_path / "model.bin"), "--tokenizer",
                              str(tmp_path / "tok.bin"), "--out", str(tmp_path / "hf")])
    assert res.exit_code == 0, res.output
    table = probe(str(tmp_path / "hf"), "builtin:pydoc", max_tokens=64, seq_len=16, batch_size=2,
                  stats="align_mlp_mid")
    assert sorted(table.layer.unique()) == [0, 1, 2] and table.value.between(-1, 1).all()
    assert (table.n_tokens > 0).all()
