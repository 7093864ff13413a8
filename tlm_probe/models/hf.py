"""transformers Auto-class registration: after tlm_probe.register_with_transformers() (which `import
tlm_probe` calls when transformers is already imported), `AutoModelForCausalLM.from_pretrained(path)` loads
a tlm checkpoint folder, and `save_pretrained` writes one that `load_tlm` reads. Without registration a
folder loads with trust_remote_code=True through the code file it carries (models/remote_code.py).

TLMForCausalLM adopts the TaperedLM's modules as its own children and runs TaperedLM.forward on them, so
its state-dict keys are exactly those of model.safetensors (no prefix, no conversion table) and the
per-layer widths travel in config.json. For run_with_cache and the hook registry, load with
`tlm_probe.models.io.load_tlm`.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationMixin,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.hf_tokenizer import TLMByteTokenizer
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.remote_code import hf_keys, write_code_file
from tlm_probe.models.tl_habits import TLHabits

_FIELDS = tuple(TLMConfig.__dataclass_fields__)


class TLMHFConfig(PretrainedConfig):
    model_type = "tlm"
    # the names transformers' generation and cache code read (DynamicCache sizes itself from them)
    attribute_map = {
        "num_hidden_layers": "n_layers",
        "hidden_size": "d_model",
        "num_attention_heads": "n_heads",
        "max_position_embeddings": "max_seq_len",
    }

    def __init__(self, **kwargs):
        ours = {k: kwargs.pop(k) for k in list(kwargs) if k in _FIELDS}
        cfg = TLMConfig.from_dict(ours)
        kwargs.pop("tie_word_embeddings", None)
        super().__init__(tie_word_embeddings=cfg.tie_embeddings, **kwargs)
        for k, v in cfg.to_dict().items():
            if k != "model_type":
                setattr(self, k, v)

    def to_tlm(self) -> TLMConfig:
        # fields that config.json leaves out when they hold their default (uniform layer_heads) are absent
        return TLMConfig.from_dict({k: getattr(self, k) for k in _FIELDS if hasattr(self, k)})


class TLMForCausalLM(TLHabits, PreTrainedModel, GenerationMixin):
    config_class = TLMHFConfig
    base_model_prefix = "tlm"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]
    _tied_weights_keys = {"unembed.weight": "embed.weight"}

    def __init__(self, config: TLMHFConfig):
        from tlm_probe.models.tlm import TaperedLM  # not at import time: registration may run mid-import

        super().__init__(config)
        core = TaperedLM(config.to_tlm())
        self.cfg = core.cfg
        for name, child in core.named_children():
            self.add_module(name, child)
        if core.pos_embed is None:
            self.pos_embed = None
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # called for modules materialised from the meta device; loaded weights are overwritten afterwards;
        # a module with an initialisation of its own (rotary tables, a mixer's memory) names it tlm_init
        if callable(getattr(module, "tlm_init", None)):
            module.tlm_init()
        elif isinstance(module, (nn.Linear, nn.Embedding)) and module.weight.numel() > 0:  # d_l = 0: empty
            nn.init.normal_(module.weight, 0.0, self.cfg.init_scale)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' save_pretrained, plus modeling_tlm.py and the auto_map naming it (remote_code.py),
        as save_tlm writes: the folder loads with trust_remote_code=True without tlm_probe's registration."""
        self.config.auto_map = hf_keys()["auto_map"]
        super().save_pretrained(save_directory, *args, **kwargs)
        write_code_file(save_directory)

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def get_output_embeddings(self) -> nn.Module:
        return self.unembed

    def generate(self, *args, **kwargs):
        """GenerationMixin.generate; a mixer without a key/value state (its row's kv_cache) generates without
        a cache, its whole prefix recomputed each step (transformers would otherwise feed only the new id)."""
        if not MIXERS.get(self.config.mixer).kv_cache:
            kwargs["use_cache"] = False
        return super().generate(*args, **kwargs)

    def create_masks_for_generate(self, attention_mask=None, **_):
        """generate() calls this with a compilable cache (StaticCache) to turn the (B, S) padding mask into
        a 4-D one; TaperedLM.forward builds its own causal and padding masks from the (B, S) mask, so it
        gets that mask unchanged."""
        return attention_mask

    def forward(
        self, input_ids: torch.Tensor, attention_mask=None, labels=None, cache=None, use_cache=None, **kwargs
    ) -> CausalLMOutputWithPast:
        """generate() passes a Cache (keys/values of the tokens so far; `past_key_values` before
        transformers 5) and only the ids not yet in it."""
        from tlm_probe.models.tlm import TaperedLM, next_token_nll

        cache = cache if cache is not None else kwargs.get("past_key_values")
        if not MIXERS.get(self.config.mixer).kv_cache:
            cache = None  # generate() then feeds the whole prefix at every step
        elif use_cache and cache is None:
            cache = DynamicCache()
        logits = TaperedLM.forward(  # same code path as the probe's model
            self, input_ids, attention_mask=attention_mask, past_key_values=cache
        )
        loss = None if labels is None else next_token_nll(logits, labels, attention_mask=attention_mask)
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache)


def register_auto_classes() -> None:
    try:
        AutoConfig.register("tlm", TLMHFConfig)
        AutoModelForCausalLM.register(TLMHFConfig, TLMForCausalLM)
    except ValueError:  # already registered
        pass
    # byte-tokenizer runs without tokenizer files (models/hf_tokenizer.py)
    AutoTokenizer.register(TLMHFConfig, fast_tokenizer_class=TLMByteTokenizer, exist_ok=True)


# idempotent; importing this module registers (a folder's modeling_tlm.py imports it: models/remote_code.py)
register_auto_classes()
