"""The fused logit lens (one max, one exp, batched dots per layer) and its position sample, against an
independent per-token float64 recomputation with log_softmax (the textbook definitions)."""

import copy
import math

import pytest
import torch
from models_zoo import build_model

from tlm_probe.capture import load_probe_model
from tlm_probe.commands.probe import lens_cost_line
from tlm_probe.importance import logit_lens
from tlm_probe.importance.logit_lens import LogitLens, sampled_positions
from tlm_probe.importance.suite import ImportanceOptions, run_importance

EPS32, EPS64 = 1.2e-7, 2.3e-16


def reference(head, norm, resids, final, ids, mask, pos=None):
    """Per-layer means of the four statistics in float64 from log_softmax, at positions `pos` (all: None)."""
    pos = torch.arange(ids.shape[1]) if pos is None else pos
    head, norm = copy.deepcopy(head).double(), copy.deepcopy(norm).double()  # a float64 copy of the model
    logq = torch.log_softmax(final.double(), -1)
    ok = mask.clone()
    nxt = torch.zeros_like(mask)
    nxt[:, :-1] = mask[:, :-1] & mask[:, 1:]
    out = []
    for resid in resids:
        with torch.no_grad():
            logp = torch.log_softmax(head(norm(resid.double())).double(), -1)
        kl = (logq.exp() * (logq - logp)).sum(-1)
        ent = -(logp.exp() * logp).sum(-1)
        top = (logp.argmax(-1) == logq.argmax(-1)).double()
        ce = torch.zeros_like(kl)
        ce[:, :-1] = -logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
        keep, keep_next = ok[:, pos], nxt[:, pos]
        out.append({
            "kl": kl[:, pos][keep].mean().item(), "entropy": ent[:, pos][keep].mean().item(),
            "top1": top[:, pos][keep].mean().item(), "ce": ce[:, pos][keep_next].mean().item(),
            "n": int(keep.sum()), "n_ce": int(keep_next.sum()),
        })  # fmt: skip
    return out


def setup(dtype, V=97, d=16, B=3, T=11, L=3, seed=0):
    torch.manual_seed(seed)
    head = torch.nn.Linear(d, V, bias=False).to(dtype)
    norm = torch.nn.LayerNorm(d).to(dtype)
    with torch.no_grad():
        head.weight.mul_(4.0)  # logits of a few units: a peaked, trained-looking distribution
    resids = [torch.randn(B, T, d, dtype=dtype) for _ in range(L)]
    with torch.no_grad():
        final = head(norm(resids[-1]))  # the last layer's lens is the model: KL 0 and agreement 1 there
    ids = torch.randint(0, V, (B, T))
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, T - 4 :] = False  # right padding
    mask[1, 0] = False  # a left-out first token (--exclude-bos)
    return head, norm, resids, final, ids, mask


def run_lens(head, norm, resids, final, ids, mask, positions=0, seed=0):
    lens = LogitLens(len(resids), norm, head, positions, seed)
    fin = lens.final(final, mask)
    for layer, r in enumerate(resids):
        lens.update(layer, r, fin, ids, mask)
    return lens


def check(lens, want, tol):
    rows = lens.rows()
    for layer, w in enumerate(want):
        for name in ("kl", "entropy", "top1", "ce"):
            got = rows[f"logit_lens_{name}"][layer]
            assert got["value"] == pytest.approx(w[name], abs=tol), (name, layer)
            assert got["n_tokens"] == (w["n_ce"] if name == "ce" else w["n"])


@pytest.mark.parametrize("chunk", [None, 3 * 97])
def test_fused_lens_float64_equals_log_softmax_definitions(monkeypatch, chunk):
    """float64 end to end: the log-sum-exp identities differ from the definitions by rounding only; every
    term is at most max|z| + log V (~ 40 here) and a sum over V = 97 terms loses at most ~V eps relative:
    bound 64 x eps64 x V x 40. chunk: 3 tokens per unembedding, so chunk edges fall inside sequences."""
    if chunk:
        monkeypatch.setattr(logit_lens, "CHUNK_ELEMENTS", chunk)
    args = setup(torch.float64)
    lens = run_lens(*args)
    check(lens, reference(*args), 64 * EPS64 * 97 * 40)
    assert lens.rows()["logit_lens_kl"][-1]["value"] == pytest.approx(0.0, abs=1e-12)


def test_fused_lens_float32_within_rounding():
    """float32 model: KL = sum q log q - sum q z + lse cancels terms of size max|z| + log V (~ 40) at float32
    precision, plus pairwise sums over V = 97 (log2 V ~ 7 roundings): bound 8 x eps32 x 40 x 7 ~ 2.7e-4 on
    a mean of values of order 1-10."""
    args = setup(torch.float32)
    zmax = args[0](args[1](args[2][0])).abs().max().item()
    tol = 8 * EPS32 * (zmax + math.log(97)) * math.log2(97)
    check(run_lens(*args), reference(*args), tol)


def test_position_sample_equals_full_lens_restricted_to_those_positions():
    args = setup(torch.float64, T=13)
    pos = sampled_positions(13, 5, seed=7)
    assert pos.tolist() == sorted(set(pos.tolist())) and len(pos) == 5
    assert pos.tolist() == sampled_positions(13, 5, seed=7).tolist()  # seeded: the same every time
    assert sampled_positions(13, 13, 7) is None and sampled_positions(13, 0, 7) is None  # all positions
    lens = run_lens(*args, positions=5, seed=7)
    check(lens, reference(*args, pos=pos), 64 * EPS64 * 97 * 40)
    assert lens.provenance()["decoded_positions"] == {"13": pos.tolist()}
    assert lens.provenance()["positions"] == "5 per sequence, seed 7"
    assert lens.decoded_rows == pytest.approx(3 * 5 / 13)
    head, norm, resids, final, ids, mask = args
    only = torch.zeros_like(mask)
    only[:, pos] = mask[:, pos]
    full = run_lens(head, norm, resids, final, ids, only)  # the full lens, its mask cut to those positions
    assert full.provenance()["positions"] == "all"
    for name in ("kl", "entropy", "top1"):  # (CE's successor would be cut too: checked against reference)
        for a, b in zip(lens.rows()[f"logit_lens_{name}"], full.rows()[f"logit_lens_{name}"], strict=True):
            assert a["value"] == pytest.approx(b["value"], abs=1e-12) and a["n_tokens"] == b["n_tokens"]


def test_run_importance_records_the_sample_and_counts_its_share(tmp_path):
    pm = load_probe_model(build_model("llama", tmp_path / "llama"))
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(5, pm.vocab_size, (2, 16), generator=g),
             "attention_mask": torch.ones(2, 16, dtype=torch.long)} for _ in range(2)]  # fmt: skip
    stats = ["logit_lens_kl", "logit_lens_ce"]
    _, _, full = run_importance(pm, data, stats, ImportanceOptions())
    rows, _, part = run_importance(pm, data, stats, ImportanceOptions(lens_positions=4, seed=3))
    assert part["logit_lens"]["decoded_positions"] == {"16": sampled_positions(16, 4, 3).tolist()}
    kl = [r for r in rows if r["statistic"] == "logit_lens_kl"]
    assert all(r["n_tokens"] == 2 * 2 * 4 for r in kl)
    extra_full = full["passes"]["clean"]["forwards"] - 1  # the lens's unembeddings beyond the clean forward
    extra_part = part["passes"]["clean"]["forwards"] - 1
    assert extra_part == pytest.approx(extra_full * 4 / 16, abs=1e-4)  # rounded to 4 decimals
    cost = part["logit_lens"]
    assert 0 < cost["time_share"] <= 1 and 0 < cost["memory_share"] < 1 and cost["peak_bytes"] > 0
    line = lens_cost_line(cost)
    assert line.startswith("logit lens: ") and "4 per sequence, seed 3" in line
