"""`tlm probe --stats importance|all` says the importance pass's expected cost before it runs (issue 24).

The printed count must be provenance's pass count (the run's own PassCounter) and a closed form derived
here from the rules the code documents (importance/suite.py, restart.py, passes.py), on a tiny Llama of L
layers with untied embeddings:
- head share h = V·d / (every 2-D weight but the input embedding, a lookup), from config.json;
- clean pass: one forward per row, plus the logit lens by its FLOPs (issue 34) on the decoded share s of
  the positions (s = 1, or k/T with lens_positions = k): per decoded position L·(2·d·V + 8·V) + 9·V (the
  unembeddings, the vocabulary-wide passes per layer, the final prediction's), over a forward's FLOPs per
  token, 2·(matmul weights) + 4·L·d·T (attention's scores and weighted sum over T keys);
- ablations, per batch: the clean forward (1) and, per layer l and kind, the batch's rows restarted from
  the cached stream at l: the head plus the blocks l..L-1, h + (1-h)(L-l)/L. Summed over the L layers that
  is L·h + (1-h)(L+1)/2 per kind (the issue's (L+1)/2 floor, plus the head), whatever the grouping of
  kinds into one forward. Once, on the first batch (B0 rows of R), a self-check restarts at the last
  layer and stops at its output (no head): (B0/R)(1-h)/L;
- gradients: one forward and one backward per sequence of the first grad_sequences: G/R each.
Provenance rounds each part to 4 decimals, so the closed form agrees within 1e-4 (two roundings of 5e-5).
Before this change no such line was printed (the test fails at the regex).
"""

from __future__ import annotations

import json
import re

import pytest
from models_zoo import build_model
from typer.testing import CliRunner

from cli import app
from tlm_probe.importance.cost import BACKWARD_FORWARDS

runner = CliRunner()
LINE = re.compile(r"importance pass: expected ([\d.]+) forward-equivalents of its (\d+) sequences "
                  r"\((.*?); a backward counted as [\d.]+\), ([\d.]+)x the default probe "
                  r"\(one forward of the (\d+) probed")
PART = re.compile(r"(\w+) ([\d.]+)(?: \+ ([\d.]+) backward)?")
ESTIMATE = re.compile(r"importance pass: first batch [\d.e+-]+ s for [\d.e+-]+ forward-equivalents; "
                      r"about [\d.e+-]+ s in all \(estimate\)")
SEQ_LEN, BATCH = 16, 4


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return build_model("llama", tmp_path_factory.mktemp("m") / "llama")


def head_share(folder) -> float:
    c = json.loads((folder / "config.json").read_text())
    assert not c.get("tie_word_embeddings", False)  # the embedding is then a lookup, not counted
    d, heads, kv, V, ff = (c[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                          "vocab_size", "intermediate_size"))
    hd = c.get("head_dim") or d // heads
    per_layer = d * heads * hd * 2 + d * kv * hd * 2 + 3 * d * ff  # q, o; k, v; gate, up, down
    return V * d / (V * d + c["num_hidden_layers"] * per_layer)


def lens_share(folder, T: int) -> float:
    """The logit lens on every position, in forwards: its FLOPs per position over a forward's."""
    c = json.loads((folder / "config.json").read_text())
    L, d, V = c["num_hidden_layers"], c["hidden_size"], c["vocab_size"]
    forward = 2 * V * d / head_share(folder) + 4 * L * d * T  # 2 FLOPs per matmul weight, and attention
    return (L * (2 * d * V + 8 * V) + 9 * V) / forward


def closed_form(folder, R: int, kinds: int, share: float, grads: int) -> dict:
    L = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    h = head_share(folder)
    B0 = min(BATCH, R)
    ablation = 1 + kinds * (L * h + (1 - h) * (L + 1) / 2) + B0 / R * (1 - h) / L
    G = min(grads, R) / R
    return {"clean": (1 + lens_share(folder, SEQ_LEN) * share, 0.0), "ablation": (ablation, 0.0),
            "gradients": (G, G)}


def run(folder, out, stats: str, *options: str):
    args = ["probe", str(folder), "--stats", stats, "--out", str(out), "--max-tokens", str(12 * SEQ_LEN),
            "--split", "all",  # the text this count was worked out on (the default reads val)
            "--seq-len", str(SEQ_LEN), "--batch-size", str(BATCH), "--threads", "1"]
    for o in options:
        args += ["--importance-option", o]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return res.output, json.loads((out / "provenance.json").read_text())


CASES = {
    # --stats all: the five ablation kinds (groups of max(1, 16 // 4) = 4 kinds share a forward),
    # the lens on every position, Taylor/Fisher on the first 32 (here: all 12) sequences
    "all": ("all", (), 5, 1.0, 32),
    # two kinds one at a time (ablation_rows 4 at batch 4), the lens on 4 of 16 positions, no gradients
    "sampled": ("logit_lens_kl,ablation_dnll_mlp_zero,ablation_dnll_block_skip",
                ("lens_positions=4", "ablation_rows=4"), 2, 4 / SEQ_LEN, 0),
}


@pytest.mark.parametrize("case", CASES)
def test_expected_cost_line_is_the_counted_passes(llama, tmp_path, case):
    stats, options, kinds, share, grads = CASES[case]
    output, prov = run(llama, tmp_path / case, stats, *options)
    m = LINE.search(output)
    assert m, output
    total, rows, parts, times, probed = m.groups()
    passes = prov["importance"]["passes"]
    printed = {p[0]: (float(p[1]), float(p[2] or 0)) for p in PART.findall(parts)}
    assert printed == {k: (v["forwards"], v["backwards"]) for k, v in passes.items()}  # the same count
    R = prov["importance"]["sequences"]
    assert int(rows) == R == int(probed) == 12  # --stats all: the stream probed the same 12 sequences
    want = closed_form(llama, R, kinds, share, grads)
    want = {k: v for k, v in want.items() if v != (0.0, 0.0)}
    assert printed.keys() == want.keys()
    for k, (f, b) in want.items():
        assert printed[k] == pytest.approx((f, b), abs=1e-4), k
    fe = sum(f + BACKWARD_FORWARDS * b for f, b in printed.values())
    assert float(total) == pytest.approx(fe, rel=5e-4)  # printed to 4 significant digits
    assert float(times) == pytest.approx(fe * R / 12, rel=5e-3)
    assert ESTIMATE.search(output), output
    assert output.index(m.group(0)) < output.index("importance: clean pass")  # said before the pass ran


def test_weights_only_says_no_forwards():
    from tlm_probe.importance.cost import CostNotice

    said = []
    CostNotice(12, said.append).before({}, {}, 12)
    assert said == ["importance pass: no forwards (the asked statistics read only the weights)"]


def test_lens_count_is_its_flops_over_a_forwards(llama):
    """The clean pass's count (a forward, and the lens in forwards) is FLOPs as torch's own FlopCounterMode
    counts them (every matmul of the clean forward and of the lens's unembeddings; attention run eagerly so
    that its products are counted too) plus the lens's vocabulary-wide passes counted by hand, over the
    forward's (before issue 34: 1 + L x a parameter share, 1.72 forwards, where the FLOPs give 1.79)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tlm_probe.capture import load_probe_model
    from tlm_probe.importance import run_importance

    pm = load_probe_model(llama)
    pm.model.config._attn_implementation = "eager"
    g = torch.Generator().manual_seed(0)
    ones = torch.ones(BATCH, SEQ_LEN, dtype=torch.long)
    ids = [torch.randint(5, pm.vocab_size, (BATCH, SEQ_LEN), generator=g) for _ in range(2)]
    batches = [{"input_ids": x, "attention_mask": ones} for x in ids]
    with torch.inference_mode(), FlopCounterMode(display=False) as forward:
        for b in batches:
            pm.forward(b["input_ids"], b["attention_mask"])
    with FlopCounterMode(display=False) as clean:
        info = run_importance(pm, batches, ["logit_lens_kl"])[2]
    positions, V = 2 * BATCH * SEQ_LEN, pm.vocab_size  # every position decoded
    v_wide = positions * (pm.n_layers * 8 * V + 9 * V)  # LogitLens._chunk per layer; _Final once
    want = (clean.get_total_flops() + v_wide) / forward.get_total_flops()
    assert info["passes"]["clean"]["forwards"] == pytest.approx(want, abs=1e-4)
    assert clean.get_total_flops() > forward.get_total_flops()  # the lens's matmuls were counted
