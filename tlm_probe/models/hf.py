"""transformers Auto-class registration: once tlm_probe is imported,
`AutoModelForCausalLM.from_pretrained(path)` loads a tlm checkpoint folder, and `save_pretrained` writes one
that `load_tlm` reads.

TLMForCausalLM adopts the TaperedLM's modules as its own children and runs TaperedLM.forward on them, so
its state-dict keys are exactly those of model.safetensors (no prefix, no conversion table) and the
per-layer widths travel in config.json. For run_with_cache and the hook registry, load with
`tlm_probe.models.io.load_tlm`.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from tlm_probe.models.config import TLMConfig
from tlm_probe.models.layers import Rotary

_FIELDS = tuple(TLMConfig.__dataclass_fields__)


class TLMHFConfig(PretrainedConfig):
    model_type = "tlm"

    def __init__(self, **kwargs):
        ours = {k: kwargs.pop(k) for k in list(kwargs) if k in _FIELDS}
        cfg = TLMConfig.from_dict(ours)
        kwargs.pop("tie_word_embeddings", None)
        super().__init__(tie_word_embeddings=cfg.tie_embeddings, **kwargs)
        for k, v in cfg.to_dict().items():
            if k != "model_type":
                setattr(self, k, v)

    def to_tlm(self) -> TLMConfig:
        return TLMConfig.from_dict({k: getattr(self, k) for k in _FIELDS})


class TLMForCausalLM(PreTrainedModel):
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
        # called for modules materialised from the meta device; loaded weights are overwritten afterwards
        from tlm_probe.models.titans import Titans

        if isinstance(module, Rotary):
            module.reset()
        elif isinstance(module, Titans):
            module.reset_memory()
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, self.cfg.init_scale)

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def get_output_embeddings(self) -> nn.Module:
        return self.unembed

    def forward(self, input_ids: torch.Tensor, attention_mask=None, labels=None, **_) -> CausalLMOutput:
        from tlm_probe.models.tlm import TaperedLM, next_token_nll

        logits = TaperedLM.forward(self, input_ids, attention_mask=attention_mask)  # same code path
        loss = None if labels is None else next_token_nll(logits, labels, attention_mask=attention_mask)
        return CausalLMOutput(loss=loss, logits=logits)


def register() -> None:
    try:
        AutoConfig.register("tlm", TLMHFConfig)
        AutoModelForCausalLM.register(TLMHFConfig, TLMForCausalLM)
    except ValueError:  # already registered
        pass
