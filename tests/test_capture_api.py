"""The public capture API (tp.load(...).run_with_cache / hooks / stream) on every family row of the adapter
table, each on the project's tiny random models (tests/models_zoo.py, tests/families_zoo.py, our TLM, T5's
encoder stack), loaded in memory and handed to tp.load as nn.Modules.

What is compared with what, each side computed without the API:
- resid_post[l] with the model's own hidden_states[l + 1] (output_hidden_states=True); the last layer's
  hidden state is after the final norm in most families, so there it is final_norm(resid_post[L-1]) or
  resid_post[L-1] itself (encoders without a final norm);
- the pieces add up as the contract says: sequential resid_mid = resid_pre + attn_out and resid_post =
  resid_mid + mlp_out; parallel resid_post = resid_pre + attn_out + mlp_out; a block without an MLP
  resid_post = resid_pre + attn_out (post-LN blocks normalise after each add: checked through the hidden
  states only);
- each edit with a forward hand-patched by a plain PyTorch hook on the module the modeling file adds
  (test_families.REFERENCE_LAYOUT, written from the modeling files, not from the adapter table);
- afterwards no hook is left on any module and the logits are the clean ones again, also after an error.

Tolerances: float32 forwards of width-32 models of 2-4 layers; the API and the hand-patched forward run the
same operations, so most values agree bit for bit, and where the order of additions differs (a sum of
pieces, an edit's scale divided back out) by a few float32 eps (1.2e-7) times the values' size (< 50):
1e-5 absolute + 1e-5 relative leaves a factor 10 for other CPU kernels; a wrong tap moves them by 1e-2.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import transformers as T
from families_zoo import FAMILY_MODELS
from models_zoo import _ZOO, _spread_weights
from test_families import REFERENCE_LAYOUT

import tlm_probe as tp
from tlm_probe.capture.adapters import ADAPTERS
from tlm_probe.capture.native import first_tensor
from tlm_probe.errors import UserError

TOL = dict(rtol=1e-5, atol=1e-5)
B, T_LEN = 2, 12

# variant -> the module the block adds as its MLP output (models_zoo's families, our TLM and T5's encoder;
# families_zoo's come from test_families.REFERENCE_LAYOUT), read from the modeling files
MLP_MODULE = {"gpt2": "mlp", "llama": "mlp", "mistral": "mlp", "qwen2": "mlp", "gpt_neox": "mlp",
              "gpt_neox_seq": "mlp", "gptj": "mlp", "opt": "fc2", "bert": "output.dense",
              "roberta": "output.dense", "tlm": "mlp", "t5": "layer.1.DenseReluDense",
              "t5_decoder": "layer.2.DenseReluDense"}
MLP_MODULE |= {v: mods.get("mlp", mods.get("mixer")) for v, (_, mods) in REFERENCE_LAYOUT.items()}
KIND = {v: kind for v, (kind, _) in REFERENCE_LAYOUT.items()}
KIND |= dict.fromkeys(("gpt2", "llama", "mistral", "qwen2", "gpt_neox_seq", "tlm", "t5", "t5_decoder"),
                      "sequential")  # T5's decoder: resid_mid = resid_pre + attn_out (self + cross attention)
KIND |= {"gpt_neox": "parallel", "gptj": "parallel", "opt": "sequential", "bert": "post_ln",
         "roberta": "post_ln"}
SCALE = {"granite": 0.5}  # families_zoo's Granite: residual_multiplier (the block multiplies the MLP output)
SHIFT = {"mamba": 0}
"""hidden_states[l + 1] is layer l's output, but transformers' Mamba lists no embeddings first: [l]."""
VARIANTS = (*_ZOO, *FAMILY_MODELS, "tlm", "t5", "t5_decoder")


def _tlm():
    from tlm_probe.models.config import TLMConfig
    from tlm_probe.models.tlm import TaperedLM

    cfg = TLMConfig(vocab_size=61, d_model=32, n_layers=3, n_heads=4, d_ff=(96, 64, 32), max_seq_len=16)
    return TaperedLM(cfg)


def _t5(cls=T.T5EncoderModel):
    cfg = T.T5Config(vocab_size=320, d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4, dropout_rate=0.0,
                     decoder_start_token_id=0)
    return cls(cfg)


def _t5_decoder():
    """T5's decoder stack, the row `tlm probe MODEL:decoder` uses (families.encoders.STACKS)."""
    return _t5(T.T5ForConditionalGeneration)


def build(variant: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if variant in BUILDERS:
        model = BUILDERS[variant]()
    else:
        make, auto = FAMILY_MODELS[variant] if variant in FAMILY_MODELS else _ZOO[variant][:2]
        model = auto.from_config(make())
    model.eval()
    _spread_weights(model)
    return model


BUILDERS = {"tlm": _tlm, "t5": _t5, "t5_decoder": _t5_decoder}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: a thread pool costs more than it gives on a shared machine
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def handles():
    return {}


def handle(handles, variant):
    if variant not in handles:
        model = build(variant)
        if variant == "t5_decoder":  # a module whose type's row is the encoder's: the stack's row is named
            from tlm_probe.capture import wrap_model
            from tlm_probe.capture.families.encoders import STACKS

            model = wrap_model(model, adapter=STACKS[("t5", "decoder")])
        handles[variant] = tp.load(model)
    return handles[variant]


def _ids(h) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    return torch.randint(5, min(h.probe_model.vocab_size, 300), (B, T_LEN), generator=g)


def _out(h, ids) -> torch.Tensor:
    """The model's own output (logits, or an encoder's last hidden state), no API involved."""
    with torch.no_grad():
        out = h.probe_model.forward(ids, torch.ones_like(ids))
    if not isinstance(out, torch.Tensor):
        out = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
    return out.detach()


def _hidden_states(h, ids) -> tuple[torch.Tensor, ...]:
    model = h.model
    with torch.no_grad():
        if isinstance(model, T.PreTrainedModel) and getattr(model, "decoder", None) is None:
            kw = {} if not h.probe_model.is_causal else {"use_cache": False}
            return model(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True,
                         **kw).hidden_states
    return None  # our TLM, T5's decoder: checked through the sums and the edits


def _hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _mlp(h, variant, layer) -> torch.nn.Module:
    return h.probe_model.layer(layer).get_submodule(MLP_MODULE[variant])


@pytest.mark.parametrize("variant", VARIANTS)
def test_pieces_are_the_model_own_and_add_up(variant, handles):
    h = handle(handles, variant)
    ids = _ids(h)
    cache = h.run_with_cache(ids)
    L, kind = h.n_layers, KIND[variant]
    hidden = _hidden_states(h, ids)
    for l in range(L):
        pre, post = cache["resid_pre", l], cache["resid_post", l]
        if l + 1 < L:
            torch.testing.assert_close(cache["resid_pre", l + 1], post, rtol=0, atol=0)
        if hidden is not None and l + 1 < L:
            torch.testing.assert_close(post, hidden[l + SHIFT.get(variant, 1)], **TOL)
        if kind == "sequential":
            torch.testing.assert_close(cache["resid_mid", l], pre + cache["attn_out", l], **TOL)
            torch.testing.assert_close(post, cache["resid_mid", l] + cache["mlp_out", l], **TOL)
        elif kind == "parallel":
            torch.testing.assert_close(post, pre + cache["attn_out", l] + cache["mlp_out", l], **TOL)
        elif kind == "mixer_only":
            torch.testing.assert_close(post, pre + cache["attn_out", l], **TOL)
    if hidden is not None:  # the last hidden state: after the final norm where the model has one
        final = h.probe_model.final_norm()
        with torch.no_grad():
            last = final(cache["resid_post", L - 1]) if final is not None else cache["resid_post", L - 1]
        torch.testing.assert_close(first_tensor(last), hidden[L], **TOL)
    logits = _out(h, ids)
    if h.probe_model.is_causal:
        torch.testing.assert_close(cache.logits, logits, rtol=0, atol=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_zero_mlp_out_is_a_zeroed_mlp(variant, handles):
    """Zeroing a layer's MLP output (a Mamba block's mixer output: attn_out) through hooks() equals the
    forward with that module's output replaced by zeros by a plain hook; the hooks are gone after."""
    h = handle(handles, variant)
    ids, layer = _ids(h), 1
    piece = "attn_out" if KIND[variant] == "mixer_only" else "mlp_out"
    before, clean = _hooks(h.model), _out(h, ids)
    with h.hooks({(piece, layer): tp.zero()}):
        edited = _out(h, ids)
    assert _hooks(h.model) == before
    handle_ = _mlp(h, variant, layer).register_forward_hook(_zeroed)
    try:
        hand = _out(h, ids)
    finally:
        handle_.remove()
    torch.testing.assert_close(edited, hand, **TOL)
    assert (edited - clean).abs().max() > 1e-4  # the edit changed something
    torch.testing.assert_close(_out(h, ids), clean, rtol=0, atol=0)


def _zeroed(module, args, out):
    if isinstance(out, torch.Tensor):
        return torch.zeros_like(out)
    return (torch.zeros_like(out[0]), *out[1:])


def _replaced(fn):
    def hook(module, args, out):
        if isinstance(out, torch.Tensor):
            return fn(out)
        return (fn(out[0]), *out[1:])

    return hook


EDIT_VARIANTS = ("gpt2", "gpt_neox", "granite", "opt_post_ln", "bert", "mixtral", "falcon_parallel", "tlm")


@pytest.mark.parametrize("variant", EDIT_VARIANTS)
def test_every_edit_is_a_hand_patched_forward(variant, handles):
    """add, apply, patch and mean on mlp_out equal the same change made by hand to the MLP module's
    output (in the module's own units: the block multiplies Granite's by residual_multiplier)."""
    h = handle(handles, variant)
    ids, layer = _ids(h), 0
    other = torch.flip(ids, dims=[1])
    scale = SCALE.get(variant, 1.0)
    v = torch.linspace(-1, 1, h.probe_model.d_model)
    mlp = _mlp(h, variant, layer)
    seen = {}
    keep = mlp.register_forward_hook(lambda m, a, o: seen.__setitem__("o", first_tensor(o).clone()))
    with torch.no_grad():
        h.probe_model.forward(other, torch.ones_like(other))
    keep.remove()
    theirs = seen["o"]  # (B, T, d), or (B*T, d) where the model flattens tokens; a copy: Falcon adds into it
    source = h.run_with_cache(other, names=["mlp_out"], layers=[layer])
    cases = {
        "add": (tp.add(v), lambda o: o + v / scale),
        "apply": (tp.apply(lambda x: 2 * x), lambda o: 2 * o),
        "patch": (tp.patch(source), lambda o: theirs.reshape(o.shape).clone()),
        "mean": (tp.mean(source), lambda o: theirs.reshape(-1, o.shape[-1]).mean(0).expand_as(o).clone()),
    }
    for name, (edit, by_hand) in cases.items():
        with h.hooks({("mlp_out", layer): edit}):
            edited = _out(h, ids)
        hook = mlp.register_forward_hook(_replaced(by_hand))
        try:
            hand = _out(h, ids)
        finally:
            hook.remove()
        torch.testing.assert_close(edited, hand, **TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("variant", ("gpt2", "llama", "bert"))
def test_resid_post_add_is_a_hand_patched_layer(variant, handles):
    h = handle(handles, variant)
    ids, layer = _ids(h), 1
    v = torch.linspace(-0.5, 0.5, h.probe_model.d_model)
    with h.hooks({("resid_post", layer): tp.add(v)}):
        edited = _out(h, ids)
    hook = h.probe_model.layer(layer).register_forward_hook(_replaced(lambda o: o + v))
    try:
        hand = _out(h, ids)
    finally:
        hook.remove()
    torch.testing.assert_close(edited, hand, **TOL)


def test_hooks_are_removed_after_an_error(handles):
    h = handle(handles, "gpt2")
    ids, before, clean = _ids(h), _hooks(h.model), _out(h, ids := _ids(h))
    with pytest.raises(RuntimeError, match="boom"), h.hooks([(("mlp_out", [0, 1, 2]), "zero")]):
        assert _hooks(h.model) > before
        raise RuntimeError("boom")
    assert _hooks(h.model) == before
    torch.testing.assert_close(_out(h, ids), clean, rtol=0, atol=0)


def test_every_family_row_is_covered():
    """Every row of the adapter table serves a variant tested here (a new row needs a tiny model)."""
    types = {"tlm", "t5"} | {m.config.model_type for m in map(build, (*_ZOO, *FAMILY_MODELS))}
    missing = [a.family for a in ADAPTERS.values() if not set(a.model_types) & types]
    assert missing == []


def test_bad_names_layers_and_edits_are_one_line(handles):
    h = handle(handles, "opt")
    before = _hooks(h.model)  # transformers' own (its output recorders), if any
    with pytest.raises(UserError, match="unknown piece"):
        h.run_with_cache(_ids(h), names=["mlp_output"])
    with pytest.raises(UserError, match="no mlp_in"):
        h.run_with_cache(_ids(h), names=["mlp_in"])
    with pytest.raises(UserError, match="out of range"):
        h.run_with_cache(_ids(h), layers=[3])
    with pytest.raises(UserError, match="would not reach the stream"), h.hooks({("resid_mid", 0): "zero"}):
        pass
    assert _hooks(h.model) == before


def _run_under(h, edits):
    with h.hooks(edits):
        return h.run_with_cache(_ids(h), names=[])


def test_what_a_notebook_gets_wrong_is_one_user_error(handles):
    """Each was a TypeError, AttributeError or a silent wrong answer deep inside: a fraction or a bool taken
    as a layer (int(0.5) is layer 0), None as inputs, a function edit that returns nothing, add() of text, a
    user statistic of NaN (a table of NaN) or named like a built-in one (a table that cannot tell them
    apart), a piece the cache does not hold (a bare KeyError)."""
    h = handle(handles, "gpt2")
    ids = _ids(h)
    for layers in ([0.5], [True], ["1"]):
        with pytest.raises(UserError, match="a layer is an integer"):
            h.run_with_cache(ids, names=["mlp_out"], layers=layers)
    assert list(h.run_with_cache(ids, names=["mlp_out"], layers=np.int64(-1))) == [("mlp_out", 2)]
    with pytest.raises(UserError, match="got NoneType"):
        h.run_with_cache(None)
    cache = h.run_with_cache(ids.numpy(), names=["mlp_out"])  # NumPy ids: the tensor's run
    torch.testing.assert_close(cache.logits, h.run_with_cache(ids, names=[]).logits, rtol=0, atol=0)
    before = _hooks(h.model)
    with pytest.raises(UserError, match=r"returned NoneType, not a tensor"):
        _run_under(h, {("mlp_out", 0): lambda x: None})
    with pytest.raises(UserError, match=r"add\(\) takes a vector of numbers"):
        tp.add("x")
    with pytest.raises(UserError, match=r"apply\(\) takes a function"):
        tp.apply(3)
    assert _hooks(h.model) == before
    with pytest.raises(KeyError, match=r"holds \['mlp_out'\] at layers \[0, 1, 2\]"):
        cache["resid_post", 0]
    texts = ["The quick brown fox jumps over the lazy dog."] * 2
    g = tp.load(build("gpt2"), tokenizer=_ZOO["gpt2"][2]())
    with pytest.raises(UserError, match="non-finite value"):
        g.stream(texts, lambda p: p["mlp_out"].norm(dim=-1) * float("nan"), names=["mlp_out"], name="x",
                 seq_len=8, max_tokens=0)
    for name in ("align_mlp_mid", "importance", "", "a,b"):
        with pytest.raises(UserError, match="built-in statistic|non-empty word"):
            g.stream(texts, lambda p: p["mlp_out"].norm(dim=-1), names=["mlp_out"], name=name)


def test_mlp_in_is_what_the_mlp_reads(handles):
    """mlp_in is the MLP module's input: the MLP run on it gives the cached mlp_out (times the scale)."""
    for variant in ("llama", "gpt2", "gpt_neox", "granite"):
        h = handle(handles, variant)
        cache = h.run_with_cache(_ids(h), names=["mlp_in", "mlp_out"], layers=[1])
        with torch.no_grad():
            out = first_tensor(_mlp(h, variant, 1)(cache["mlp_in", 1])) * SCALE.get(variant, 1.0)
        torch.testing.assert_close(out, cache["mlp_out", 1], **TOL)


def test_text_in_and_loss_beside_the_cache(handles):
    """Text is tokenized by the model's tokenizer; the loss is the mean next-token NLL of the logits."""
    h = tp.load(build("gpt2"), tokenizer=_ZOO["gpt2"][2]())
    cache = h.run_with_cache(["The quick brown fox", "def f(x):"], names=["resid_post"], layers=[-1])
    ids, mask = cache.input_ids, cache.attention_mask
    logp = torch.log_softmax(cache.logits[:, :-1].double(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    pairs = (mask[:, 1:] * mask[:, :-1]).bool()
    torch.testing.assert_close(cache.loss, -logp[pairs].mean())
    assert list(cache) == [("resid_post", 2)] and not bool(mask.all())  # two lengths: one row padded


def test_stream_equals_the_mean_of_the_cache(handles):
    """A streamed statistic's value is the token mean of the same per-token values from run_with_cache,
    and its interval is the probe's (here: checked against align_mlp_mid, the same formula built in)."""
    h = tp.load(build("gpt2"), tokenizer=_ZOO["gpt2"][2]())
    texts = ["The quick brown fox jumps over the lazy dog. " * 2, "def f(x):\n    return x * 2\n"] * 3

    def cos(p):
        return torch.nn.functional.cosine_similarity(p["mlp_out"], p["resid_mid"], dim=-1)

    df = h.stream(texts, cos, names=["mlp_out", "resid_mid"], name="my_cos", seq_len=16, max_tokens=0)
    ref = tp.probe(h, texts, stats="align_mlp_mid", seq_len=16, max_tokens=0)
    assert (df["n_tokens"].to_numpy() == ref["n_tokens"].to_numpy()).all()
    for col in ("value", "ci_low", "ci_high"):
        torch.testing.assert_close(torch.tensor(df[col].to_numpy()), torch.tensor(ref[col].to_numpy()),
                                   rtol=1e-5, atol=1e-6)
    with pytest.warns(DeprecationWarning, match=r"stream\(corpus=\.\.\.\) is deprecated; use data="):
        old = h.stream(corpus=texts, reducer=cos, names=["mlp_out", "resid_mid"], name="my_cos", seq_len=16,
                       max_tokens=0)  # the old keyword, as tp.probe's data (the CLI's --data)
    pd.testing.assert_frame_equal(old, df)
    fig = tp.plot(df, kind="depth", statistic="my_cos")  # the table drawn as it is: its own name, its split
    assert fig.axes[0].get_ylabel() == "my_cos" and "data split all" in fig.axes[0].get_title()
    y = [line.get_ydata().tolist() for line in fig.axes[0].lines if len(line.get_ydata()) == 3]
    assert y == [df["value"].tolist()]


BACKEND_CASES = [("gpt2", "nnsight"), ("gpt_neox", "nnsight"), ("bert", "nnsight"),
                 ("gpt2", "transformer-lens"), ("bert", "transformer-lens")]


@pytest.mark.parametrize("variant, backend", BACKEND_CASES)
def test_the_same_names_through_the_other_backends(variant, backend, handles):
    """nnsight and TransformerLens (the probe's backends) give the same pieces under the same names."""
    h = handle(handles, variant)
    ids, names = _ids(h), ["resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"]
    native = h.run_with_cache(ids, names=names)
    other = h.run_with_cache(ids, names=names, backend=backend)
    assert list(other) == list(native)
    for key in native:
        torch.testing.assert_close(other[key], native[key], **TOL)
    if native.loss is not None:
        torch.testing.assert_close(other.loss, native.loss, **TOL)
    with pytest.raises(UserError, match="native only"):
        h.run_with_cache(ids, names=["mlp_in"], backend=backend)


@pytest.mark.parametrize("variant", ("gpt2", "llama", "tlm"))
def test_pattern_is_a_softmax_over_the_keys(variant, handles):
    """The attention pattern (eager attention switched on for the run and back): (B, H, T, T), causal rows
    summing to 1; the model's attention implementation is what it was afterwards."""
    h = handle(handles, variant)
    was = getattr(getattr(h.model, "config", None), "_attn_implementation", None)
    cache = h.run_with_cache(_ids(h), names=["pattern", "mlp_out"], layers=[1], dtype=torch.float64)
    p = cache["pattern", 1]
    assert p.shape[0] == B and p.shape[2:] == (T_LEN, T_LEN) and p.dtype == torch.float64
    torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:3], dtype=torch.float64), atol=1e-6, rtol=0)
    assert float(p.triu(1).abs().max()) == 0.0  # causal: no weight on later keys
    assert getattr(getattr(h.model, "config", None), "_attn_implementation", None) == was
    assert "loss=" in repr(cache) and cache.stack("mlp_out").shape[0] == 1


@pytest.mark.parametrize("variant", ("gpt2", "llama", "gpt_neox"))
def test_input_edits_are_hand_patched_inputs(variant, handles):
    """resid_pre is the layer's input: adding v there equals adding v to the previous layer's output (by
    hand); mlp_in is the MLP's input: doubling it equals a hand pre-hook that doubles the MLP's input."""
    h = handle(handles, variant)
    ids, v = _ids(h), torch.linspace(-0.5, 0.5, h.probe_model.d_model)
    with h.hooks({("resid_pre", 1): tp.add(v)}):
        edited = _out(h, ids)
    hook = h.probe_model.layer(0).register_forward_hook(_replaced(lambda o: o + v))
    try:
        hand = _out(h, ids)
    finally:
        hook.remove()
    torch.testing.assert_close(edited, hand, **TOL)
    with h.hooks({("mlp_in", 1): tp.apply(lambda x: 2 * x)}):
        edited = _out(h, ids)
    hook = _mlp(h, variant, 1).register_forward_pre_hook(lambda m, args: (2 * args[0], *args[1:]))
    try:
        hand = _out(h, ids)
    finally:
        hook.remove()
    torch.testing.assert_close(edited, hand, **TOL)
    assert (edited - _out(h, ids)).abs().max() > 1e-4
