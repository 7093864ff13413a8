"""Model presets at the paper's three scales: Llama-style (SwiGLU, RMSNorm, RoPE, tied embeddings),
Llama-3 tokenizer (vocab 128,256), 4K context. Exact parameter counts are printed by `tlm info` and
checked in tests; the schedule only moves MLP width between layers, so every schedule has the same count.
Every preset exists for every mixer (`mixer=`): Hope-attention splits the MLP budget over its continuum
memory's levels (same MLP parameters as attention); Titans adds its memory layer to the attention (so it
is larger: see `tlm schedule --preset P --mixer titans`) and, at paper scale, attends over the window its
registry row's `paper_scale` sets.
"""

from __future__ import annotations

from tlm_probe.models.config import TLMConfig, config_with_schedule
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.registry import Registry
from tlm_probe.schedules.widths import ScheduleSpec

LLAMA3_VOCAB = 128_256

PRESETS: Registry[dict] = Registry("preset", {
    # name: architecture (uniform d_ff is the mean width every schedule keeps)
    "tlm-440m": dict(d_model=1024, n_layers=24, n_heads=16, d_ff=2816),  # 439,665,664 params
    "tlm-760m": dict(d_model=1280, n_layers=28, n_heads=20, d_ff=3840),  # 760,618,240 params
    "tlm-1.3b": dict(d_model=1792, n_layers=28, n_heads=14, d_ff=4864),  # 1,321,766,656 params
    # small presets for CPU work
    "tlm-tiny": dict(d_model=128, n_layers=4, n_heads=4, d_ff=512, vocab_size=256, max_seq_len=256),
    "tlm-small": dict(d_model=256, n_layers=6, n_heads=4, d_ff=1024, vocab_size=256, max_seq_len=512),
})
_DEFAULTS = dict(vocab_size=LLAMA3_VOCAB, max_seq_len=4096, mlp="swiglu", norm="rmsnorm",
                 positions="rope", tie_embeddings=True)
_PAPER_SCALE = ("tlm-440m", "tlm-760m", "tlm-1.3b")
"""The presets where a mixer's row sets its own `paper_scale` settings (models/mixer_registry.py)."""


def preset_config(name: str, schedule: ScheduleSpec | str = "uniform", mixer: str = "attention",
                  **overrides) -> TLMConfig:
    kw = {**_DEFAULTS, **PRESETS.get(name), "mixer": mixer, **_mixer_settings(mixer, name), **overrides}
    d_ff = kw.pop("d_ff")
    return config_with_schedule(schedule, d_ff, **kw)


def _mixer_settings(mixer: str, preset: str) -> dict:
    row = MIXERS.get(mixer)
    return dict(row.paper_scale) if row is not None and preset in _PAPER_SCALE else {}
