"""Blocks with a recurrent token mixer and no MLP (Mamba): block-level statistics only."""

from __future__ import annotations

from tlm_probe.capture.rows import MIXER_ONLY, Adapter, fixed

MAMBA = Adapter(
    "mamba",
    ("mamba",),
    layers="layers",
    mlp=None,
    mlp_down=None,
    final_norm="norm_f",
    lm_head="lm_head",
    taps={MIXER_ONLY: {"resid_pre": ":in", "attn_out": "mixer:out", "resid_post": ":out"}},
    kind_of=fixed(MIXER_ONLY),
    tl_refusal=fixed("its Mamba bridge's hooks are not mapped onto the probe's pieces yet"),
    notes="no MLP: attn_out is the mixer's output; only block-level statistics (resid_pre, resid_post)",
)
