"""`tp.load(model)`: a loaded model of any supported family under the contract's piece names.

    h = tp.load("HuggingFaceTB/SmolLM2-135M")
    cache = h.run_with_cache("The quick brown fox", names=["mlp_out", "resid_post"], layers=[0, 5])
    cache["mlp_out", 5]                      # (B, T, d)
    with h.hooks({("mlp_out", 5): tp.zero()}):
        ablated = h.run_with_cache("The quick brown fox", names=[])
    ablated.loss - cache.loss                 # what layer 5's MLP is worth on this text
    h.stream("builtin:pydoc", my_stat, names=["mlp_out", "resid_mid"])   # a tidy table with 95% CIs

Everything here is a thin layer over the probe's own parts: the adapter row says where each piece is
(capture/names.py), the probe's tap hooks capture it (capture/cache.py), edits rewrite it at the same taps
(capture/edits.py) and `stream` is the probe's streaming engine with the caller's statistic
(probe/custom.py, stats/user.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tlm_probe.api_names import renamed_keywords
from tlm_probe.capture import ProbeModel
from tlm_probe.capture import cache as capture
from tlm_probe.capture.edits import Edits, hooked, parse_edits
from tlm_probe.capture.inputs import Inputs, encode
from tlm_probe.capture.names import NAMES, Layers, Names, check_layers, check_names, sources
from tlm_probe.data.sequences import Corpus
from tlm_probe.errors import UserError
from tlm_probe.probe.custom import stream_accumulators
from tlm_probe.probe.options import ProbeOptions
from tlm_probe.stats.user import Reducer, UserStatistic

if TYPE_CHECKING:
    import pandas as pd

STREAMED = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")
"""The pieces a streamed statistic may read (the probe's sink captures these on every family)."""


class Handle:
    """A loaded model plus the adapter row that names its pieces (`tp.load` makes one).

    Attributes: `model` (the nn.Module), `tokenizer`, `probe_model` (the ProbeModel the probe uses),
    `n_layers`, `family`, `names` (the pieces this model gives) and `refused` ({piece: why not})."""

    def __init__(self, pm: ProbeModel) -> None:
        self.probe_model = pm
        given, refused = sources(pm)
        self.refused: dict[str, str] = refused
        self.names: tuple[str, ...] = tuple(n for n in NAMES if n in given)

    @property
    def model(self) -> nn.Module:
        return self.probe_model.model

    @property
    def tokenizer(self) -> Any | None:
        return self.probe_model.tokenizer

    @property
    def n_layers(self) -> int:
        return self.probe_model.n_layers

    @property
    def family(self) -> str:
        return self.probe_model.family

    def __repr__(self) -> str:
        pm = self.probe_model
        return f"Handle({pm.name!r}, family={pm.family}, {pm.n_layers} layers, {pm.block_kind} blocks)"

    def encode(self, inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask) of `inputs` as run_with_cache runs them (right-padded)."""
        return encode(self.probe_model, inputs)

    def run_with_cache(self, inputs: Inputs, names: Names = None, layers: Layers = None,
                       device: str | torch.device | None = None, dtype: torch.dtype | None = None,
                       backend: str = "native") -> capture.Cache:
        """Run the model once and keep the named pieces of the asked layers.

        inputs: a text, a list of texts, token ids (1-D or 2-D tensor, list, list of lists) or a tokenizer's
        output. names: pieces to keep (default: every one this model gives but `pattern`; `[]` keeps none,
        for logits and loss alone). layers: an int or ints (negative from the end; default all).
        device / dtype: move / cast the kept tensors (e.g. device="cpu"). Returns a Cache: a dict keyed
        (name, layer), with `.logits`, `.loss` (mean next-token NLL over unpadded tokens, float64),
        `.input_ids` and `.attention_mask`. Edits of an enclosing `hooks(...)` apply. backend: "native"
        (default), or "nnsight" / "transformer-lens", the probe's other backends, under the same names
        (not mlp_in or pattern; what each backend can serve is as for `tlm probe --backend`)."""
        pm = self.probe_model
        names, layers = check_names(pm, names), check_layers(pm, layers)
        ids, mask = encode(pm, inputs)
        return capture.run_with_cache(pm, ids, mask, names, layers, device, dtype, backend)

    @contextlib.contextmanager
    def hooks(self, edits: Edits) -> Iterator[Handle]:
        """Inside the `with`, every forward of the model carries `edits`; on exit, error or not, the model
        is as it was (every hook removed).

        edits: {(name, layer): edit}, layer an int or a tuple or range of ints (or a list of
        ((name, layers), edit) pairs, where layers may be a list); an edit is tp.zero(), tp.mean(cache),
        tp.patch(cache), tp.add(vector), tp.apply(fn), "zero", or a function of the (B, T, d) piece.
        Editable: attn_out, mlp_out, resid_post (module outputs), resid_pre (the layer's input), mlp_in (the
        MLP's input), and resid_mid or pattern where the row taps them at an output; the others are
        refused with the reason before anything runs."""
        parsed = parse_edits(self.probe_model, edits)
        with hooked(self.probe_model, parsed):
            yield self

    @renamed_keywords(corpus="data")
    def stream(self, data: Corpus, reducer: Reducer, names: Names, name: str = "custom",
               options: ProbeOptions | None = None, *, progress: bool = False, **fields: Any) -> pd.DataFrame:
        """Stream a corpus through the probe's engine and compute `reducer` per layer, with the same 95%
        CI over sequences, bounded memory and torchrun merging as the built-in statistics.

        data: the corpus, what `tlm probe --data` takes (builtin:pydoc, a text file or folder, hf:NAME,
        token ids, or a list of texts; corpus= is its deprecated name). reducer(pieces) -> (B, T) per-token
        values, where pieces is {name: (B, T, d)} of one layer of one batch, for the `names` asked (of
        resid_pre, attn_out, resid_mid, mlp_out, resid_post); a non-finite value at a counted token is
        refused. name: the statistic column's value (a word, not a built-in statistic's name). options /
        fields: ProbeOptions (max_tokens, seq_len, batch_size, exclude_bos, backend, split, ...; stats is
        not used). Returns the tidy result table of `tp.probe` (model, layer, depth, statistic, value,
        ci_low, ci_high, n_tokens, d_ff), with std (over tokens) beside it."""
        pm = self.probe_model
        needs = check_names(pm, names)
        wrong = [n for n in needs if n not in STREAMED]
        if not needs:
            raise UserError(f"a streamed statistic reads at least one piece: give names= (of "
                            f"{', '.join(STREAMED)})")
        if wrong:
            raise UserError(f"a streamed statistic reads {', '.join(STREAMED)}; not {', '.join(wrong)}")
        opts = replace(options or ProbeOptions(), data=data, **fields)
        acc = UserStatistic(pm.n_layers, pm.d_ff, name, reducer, needs)
        table, _ = stream_accumulators(pm, [acc], opts, progress)
        return table

