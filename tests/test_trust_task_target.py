"""`tlm trust`'s task target (issue 33 part 2): the accuracy lost on a multiple-choice task when a layer's
MLP is zeroed (or its block skipped) equals a hand computation (a plain torch forward hook on the Hugging
Face module, every item scored by one unpadded forward, the harness's tokenization rule); a planted model
whose one layer carries the answers ranks that layer first; a proxy that disagrees with it is flagged."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from cli import app
from tlm_probe.trust.agreement import judge

N_ITEMS = 24
STATS = "norm_ratio_mlp,ablation_dnll_mlp_zero"


def _scaled_llama(folder, scales, sharpen: float = 6.0):
    """The zoo's tiny Llama with every matrix times `sharpen` (peaked next-token distributions, so that
    answers can change), layer l's MLP down projection times scales[l] too, and a context (rotary: any)
    of 512 that holds every item whole (so the scorer reads each in one window)."""
    from models_zoo import build_model
    from transformers import AutoModelForCausalLM

    build_model("llama", folder, seed=2)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.config.max_position_embeddings = 512
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(sharpen) if p.dim() > 1 else None
        for layer, s in zip(model.model.layers, scales, strict=True):
            layer.mlp.down_proj.weight.mul_(s)
    model.save_pretrained(folder)
    return folder


def _items(folder, n=N_ITEMS):
    from tlm_probe.eval.builtin_tasks import write_task

    write_task("pydoc-mc", folder)
    lines = (folder / "pydoc-mc.jsonl").read_text().splitlines()[:n]  # the harness's --limit: the first n
    return [json.loads(line) for line in lines]


def _choose(model, tok, item, max_len: int) -> int:
    """The choice with the highest summed log-probability: the harness splits context + " " + choice as
    tokens(whole)[len(tokens(context)):], the model reads at most max_len ids."""
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    ctx = enc(item["context"])
    scores = []
    for choice in item["choices"]:
        full = enc(item["context"] + " " + choice)
        n = len(full) - len(ctx)
        inp = full[:-1][-max_len:]
        with torch.no_grad():
            logp = F.log_softmax(model(torch.tensor([inp])).logits[0].double(), -1)
        scores.append(float(logp[-n:].gather(-1, torch.tensor(full[-n:])[:, None]).sum()))
    return int(np.argmax(scores))


def _hand_correct(folder, items, layer=None, part="mlp"):
    """1/0 per item with layer's MLP output zeroed (part mlp) or its block returning its input (block)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    handle = None
    if layer is not None and part == "mlp":
        handle = model.model.layers[layer].mlp.register_forward_hook(lambda m, a, out: torch.zeros_like(out))
    elif layer is not None:
        def skip(m, args, kwargs, out):
            x = args[0] if args else kwargs["hidden_states"]
            return (x, *out[1:]) if isinstance(out, tuple) else x
        handle = model.model.layers[layer].register_forward_hook(skip, with_kwargs=True)
    try:
        L = model.config.max_position_embeddings
        assert all(len(tok(it["context"] + " " + c)["input_ids"]) <= L for it in items for c in it["choices"])
        return np.array([_choose(model, tok, it, L) == it["label"] for it in items], dtype=float)
    finally:
        if handle:
            handle.remove()


def _ids(tmp_path, reverse: bool = False):
    ids = tmp_path / f"ids{'-reversed' if reverse else ''}.npy"
    rows = np.random.default_rng(0).integers(5, 100, (8, 32)).astype(np.uint32)
    np.save(ids, rows[::-1] if reverse else rows)
    return ids


def _trust(tmp_path, model, *extra):
    # the same sequences in another order: per-layer means equal the first corpus's up to rounding, as two
    # copies of one file gave before one corpus given twice was refused (issue 49); these tests are of the
    # task target, not of agreement across corpora
    ids, other = _ids(tmp_path), _ids(tmp_path, reverse=True)
    out = tmp_path / "t"
    res = CliRunner().invoke(app, ["trust", str(model), "--data", str(ids), "--data", str(other),
                                   "--stats", STATS, "--no-halves", "--device", "cpu", "--task-limit",
                                   str(N_ITEMS), *extra, "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("part", ["mlp", "block"])
def test_accuracy_drop_equals_a_hand_computation(tmp_path, part):
    model = _scaled_llama(tmp_path / "m", [1.0, 1.0, 1.0])
    out = _trust(tmp_path, model, "--target-ablation", part)
    got = pd.read_csv(out / "task_target.csv")
    got = got[got["task"] == "pydoc-mc"].set_index("layer")
    items = _items(tmp_path / "items")
    clean = _hand_correct(model, items)
    moved = 0
    for layer in range(3):
        ablated = _hand_correct(model, items, layer, part)
        assert got.loc[layer, "n"] == N_ITEMS
        assert round(got.loc[layer, "acc_clean"] * N_ITEMS) == clean.sum()
        assert round(got.loc[layer, "acc_ablated"] * N_ITEMS) == ablated.sum()
        d = clean - ablated
        assert got.loc[layer, "acc_drop_stderr"] == pytest.approx(d.std(ddof=1) / np.sqrt(N_ITEMS), abs=1e-12)
        moved += int((d != 0).sum())
    assert moved, "a degenerate model: no ablation changed an answer"
    doc = json.loads((out / "trust.json").read_text())
    name = f"task_acc_drop_{'mlp_zero' if part == 'mlp' else 'block_skip'}"
    assert doc["task_target"]["statistic"] == name and doc["task_target"]["n_items"] == N_ITEMS
    assert doc["task_target"]["tasks"] == [{"task": "pydoc-mc", "n": N_ITEMS, "acc_clean": clean.mean()}]


def test_a_planted_layer_that_carries_the_answers_ranks_first(tmp_path):
    """Layer 1's MLP dominates the logits, the others are near zero; the task (a task YAML, as tlm eval
    reads one) asks for one of four letters after each context and its labels are the clean model's own
    answers, so ablating layer 1 costs many of them and the others none."""
    model = _scaled_llama(tmp_path / "m", [1e-3, 10.0, 1e-3])
    items = [{**it, "choices": ["a", "b", "c", "d"]} for it in _items(tmp_path / "items")]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf, tok = AutoModelForCausalLM.from_pretrained(model).eval(), AutoTokenizer.from_pretrained(model)
    planted = [{**it, "label": _choose(hf, tok, it, hf.config.max_position_embeddings)} for it in items]
    data = tmp_path / "planted.jsonl"
    data.write_text("".join(json.dumps(it) + "\n" for it in planted))
    task = tmp_path / "planted-mc.yaml"
    task.write_text(f"task: planted-mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
                    f"{json.dumps(str(data))}\noutput_type: multiple_choice\ntest_split: test\n"
                    "doc_to_text: \"{{context}}\"\ndoc_to_choice: \"{{choices}}\"\ndoc_to_target: label\n"
                    "target_delimiter: \" \"\nmetric_list:\n  - metric: acc\n")
    out = _trust(tmp_path, model, "--task", str(task))
    got = pd.read_csv(out / "task_target.csv")
    pooled = got[got["task"] == "all"].set_index("layer")["acc_drop"]
    assert got["acc_clean"].iloc[0] > 0.9  # the labels are its own answers (a near tie may differ)
    assert pooled.idxmax() == 1 and pooled[1] >= 0.3
    assert pooled[[0, 2]].abs().max() <= 1 / N_ITEMS
    rows = pd.read_csv(out / "trust.csv").set_index("statistic")
    assert rows.loc["ablation_dnll_mlp_zero", "spearman_with_task"] > 0.5  # the NLL target agrees


def test_a_proxy_that_disagrees_with_the_task_target_is_flagged():
    target = np.array([[9, 5, 3, 1, 0.5, 0.2]] * 2, dtype=float)
    drop = np.array([0.5, 0.2, 0.1, 0.05, 0.0, -0.01])
    table = {"ablation_dnll_mlp_zero": target, "good": target + 1, "reversed": -target}
    judged = judge(table, "ablation_dnll_mlp_zero", 0.7, 0.5, ("task_acc_drop", drop))
    rows = {r["statistic"]: r for r in judged}
    assert rows["good"]["flags"] == "ok" and rows["good"]["spearman_with_task"] == pytest.approx(1.0)
    assert rows["reversed"]["spearman_with_task"] == pytest.approx(-1.0)
    assert "disagrees with task_acc_drop" in rows["reversed"]["flags"]
    assert rows["ablation_dnll_mlp_zero"]["spearman_with_task"] == pytest.approx(1.0)


@pytest.mark.parametrize("bad,needle", [({"task_limit": -1}, "task_limit must be an integer in"),
                                        ({"target_ablation": "attn"}, "--target-ablation"),
                                        ({"task": "pydoc-mc,none"}, "--task none")])
def test_bad_task_settings_are_one_error(bad, needle):
    from tlm_probe.errors import UserError
    from tlm_probe.trust.options import TrustOptions

    with pytest.raises(UserError, match=needle):
        TrustOptions(data=("a", "b"), **bad)
