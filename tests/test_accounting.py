import pytest
import torch

from tlm_probe.models.accounting import count_params, train_flops_per_token
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.presets import preset_config
from tlm_probe.models.tlm import TaperedLM

PRESET_PARAMS = {"tlm-440m": 439_665_664, "tlm-760m": 760_618_240, "tlm-1.3b": 1_321_766_656}


@pytest.mark.parametrize("name", PRESET_PARAMS)
def test_presets_on_meta_device_match_formula(name):
    for schedule in ("uniform", "cosine:1.5:0.5"):
        cfg = preset_config(name, schedule)
        with torch.device("meta"):
            model = TaperedLM(cfg)  # no memory allocated
        assert next(model.parameters()).is_meta
        assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total == PRESET_PARAMS[name]


def test_cosine_preset_widths_taper_and_flops_parity():
    u, c = preset_config("tlm-1.3b"), preset_config("tlm-1.3b", "cosine:1.5:0.5")
    assert c.d_ff[0] == 7296 and c.d_ff[-1] == 2432 and sum(c.d_ff) == sum(u.d_ff)
    assert train_flops_per_token(u) == train_flops_per_token(c)


def test_flops_formula_by_hand():
    cfg = TLMConfig(vocab_size=10, d_model=8, n_layers=2, n_heads=2, d_ff=(16, 8), max_seq_len=4, mlp="gelu")
    attn = 4 * 8 * 8
    mlp = 2 * 8 * 16 + 2 * 8 * 8
    n_matmul = 2 * attn + mlp + 10 * 8
    assert train_flops_per_token(cfg) == 6 * n_matmul + 6 * 2 * 4 * 8
