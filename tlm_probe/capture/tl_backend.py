"""TransformerLens backend: our models through their own HookPoints, HF models through TransformerBridge.

Each batch runs `run_with_cache` with a names filter that caches only the pieces the statistics need,
then hands each layer's pieces to the sink. The bridge's names follow TransformerLens conventions, which
for post-LN blocks (BERT) differ from ours: its hook_attn_out is the *normalised* attention output (our
resid_mid) and its hook_resid_mid is the sum before the second LayerNorm. The table below maps them.
"""

from __future__ import annotations

import logging
import warnings

import torch

from tlm_probe.capture.adapters import (
    PARALLEL,
    POST_LN,
    SEQUENTIAL,
    known_adapter,
    split_stack,
    stack_adapter,
)
from tlm_probe.capture.sink import StatSink
from tlm_probe.errors import UserError

_PRE_LN = {
    "resid_pre": "hook_resid_pre",
    "attn_out": "hook_attn_out",
    "resid_mid": "hook_resid_mid",
    "mlp_out": "hook_mlp_out",
    "resid_post": "hook_resid_post",
    "mlp_post": "mlp.hook_post",
}
# block kind -> piece -> hook name inside blocks.{l}
TL_NAMES = {
    SEQUENTIAL: _PRE_LN,
    PARALLEL: {k: v for k, v in _PRE_LN.items() if k != "resid_mid"},
    POST_LN: {
        "resid_pre": "hook_resid_pre",
        "attn_out": "attn.o.hook_out",
        "attn_sum": "ln1.hook_in",
        "resid_mid": "attn.hook_out",
        "mlp_out": "hook_mlp_out",
        "resid_post_prenorm": "ln2.hook_in",
        "resid_post": "hook_resid_post",
        "mlp_post": "mlp.hook_post",
    },
}


def _refuse_if_unsupported(adapter, config) -> None:
    """One line naming the backend and what to use instead, where the row says TransformerLens cannot
    serve this configuration."""
    why = adapter.tl_refusal(config) if adapter is not None and adapter.tl_refusal else None
    if why:
        raise UserError(f"the TransformerLens backend cannot probe this {adapter.family} model: {why}; "
                        "use --backend native (the default) instead of --backend transformer-lens")


def config_of(source) -> tuple[object, object] | None:
    """(row, config) of a folder or hub name from its config alone (no weights), None where the config
    cannot be read here (the loader then says why)."""
    head, stack = split_stack(str(source))
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(head)
    except Exception:  # our own checkpoints, offline hub names, unreadable files: the loader's to report
        return None
    model_type = getattr(config, "model_type", None)
    return (stack_adapter(model_type, stack) if stack else known_adapter(model_type)), config


class TransformerLensBackend:
    name = "transformer-lens"

    @staticmethod
    def check_source(source) -> None:
        """Before loading: refuse from the config (a refusal after the load came after transformers'
        load report, 11 lines for a DistilBERT checkpoint with its masked-LM head)."""
        found = config_of(source)
        if found is not None:
            _refuse_if_unsupported(*found)

    def __init__(self, sink: StatSink):
        self.sink, self.pm = sink, sink.pm
        _refuse_if_unsupported(self.pm.adapter, getattr(self.pm.model, "config", None))
        # TransformerLens' hook_attn_out / hook_mlp_out are by its convention what the block adds to the
        # stream (its Granite bridge multiplies by residual_multiplier itself): no Adapter.scale here
        sink.scales = {}
        table = TL_NAMES[self.pm.block_kind]
        self.names = {(l, p): f"blocks.{l}.{table[p]}" for l in range(self.pm.n_layers) for p in sink.pieces}
        self.runner = self.pm.model if self.pm.adapter.tl_native else _build_bridge(self.pm)
        unknown = [n for n in self.names.values() if n not in self.runner.hook_dict]
        if unknown:
            raise UserError(
                f"the TransformerLens bridge for {self.pm.family} has no hook {unknown[0]}; "
                "use --backend native"
            )

    def run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, full_output: bool = False):
        wanted = set(self.names.values())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out, cache = self.runner.run_with_cache(
                input_ids, attention_mask=attention_mask, names_filter=lambda n: n in wanted
            )
        for layer in range(self.pm.n_layers):
            raw = {
                p: cache[self.names[(layer, p)]] for p in self.sink.pieces if self.names[(layer, p)] in cache
            }
            self.sink.on_layer(layer, raw)
        return out


def _bridge_module(pm):
    """The module the bridge wraps, and its architecture name: the model itself, or for a bare encoder the
    masked-LM class built around it (Adapter.tl_architecture; the head is never run by the probe)."""
    arch = pm.adapter.tl_architecture
    if arch is None:
        return pm.model, type(pm.model).__name__
    import transformers

    param = next(pm.model.parameters())
    wrapper = getattr(transformers, arch)(pm.model.config)
    setattr(wrapper, wrapper.base_model_prefix, pm.model)
    return wrapper.to(param.device, param.dtype).eval(), arch


def _build_bridge(pm):
    """Wrap the already loaded module: no path, no hub, no tokenizer needed (token-id data works).

    `build_bridge_from_module` is TransformerLens 4.x's public way to bridge a pre-loaded model
    (transformer_lens.model_bridge.sources); `boot_transformers` would reload the config (and tokenizer)
    by name, which fails for in-memory models and offline hub names.
    """
    from transformer_lens.model_bridge.sources import build_bridge_from_module

    level = logging.getLogger().level
    logging.disable(logging.WARNING)  # the bridge logs several lines per boot about aliases and defaults
    try:
        module, arch = _bridge_module(pm)
        return build_bridge_from_module(
            module, arch, hf_config=pm.model.config, tokenizer=pm.tokenizer, model_name=pm.name
        )
    except Exception as e:  # the bridge does not cover every family transformers does
        raise UserError(
            f"TransformerLens cannot wrap this {pm.family} model ({str(e).splitlines()[0][:200]}); "
            "use --backend native"
        ) from e
    finally:
        logging.disable(logging.NOTSET)
        logging.getLogger().setLevel(level)
