"""The token mixers tlm builds: one MixerSpec row each (models/mixer_spec.py), with the settings dataclass
and the formulas the row names. No torch: a row names its module by import path.

Everything reads these rows: models/config.py (TLMConfig inherits the settings classes, config.json stores
their fields flat after `mixer`, the --mixer help lists the rows), models/mixers.py (the modules),
models/shapes.py (the tensors), models/accounting.py (parameters, FLOPs), and through TLMConfig the training
options, the CLI and the presets. Adding a mixer is its torch module plus one row here (its settings class
and formulas beside it); tests/test_mixer_registry.py builds every row through every path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from tlm_probe.models.mixer_spec import (
    NORM_PARAMS,
    Component,
    ConfigError,
    MixerSpec,
    Shapes,
    attention_params,
    attention_shapes,
    mlp_matrices,
    mlp_shapes,
    norm_shapes,
)
from tlm_probe.registry import Registry

# --- titans (MAL: neural long-term memory, then sliding-window attention; models/titans.py) ---


@dataclass(frozen=True)
class TitansSettings:
    """titans (MAL: neural long-term memory, then sliding-window attention; models/titans.py)."""

    window: int = 64
    """titans: sliding-window attention span in tokens (the query and window-1 tokens before it); the
    paper-scale presets use 1024 (this row's paper_scale)."""
    mem_chunk: int = 16
    """titans: chunk size of the parallel memory update (gradients inside a chunk are taken at the
    memory of the chunk's start)."""
    mem_expand: int = 2
    """titans: hidden width of each head's 2-layer memory MLP, as a multiple of the head dimension."""
    layer_mem_width: tuple[int, ...] = field(default=(), metadata={"schedule": "mem_schedule",
                                                                    "what": "the Titans memory's width"})
    """titans, optional: per-layer hidden width d_m of each head's memory MLP (empty: mem_expand·d_head in
    every layer)."""
    mem_persistent: int = 0
    """titans: learnable persistent-memory tokens prepended to the memory's input (0 = none)."""
    conv_kernel: int = 4
    """titans: width of the depthwise causal convolution after the q/k/v projections."""

    def validate(self) -> None:
        for key in ("window", "mem_chunk", "mem_expand", "conv_kernel"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.mem_persistent < 0:
            raise ConfigError(f"mem_persistent must be >= 0, got {self.mem_persistent}")

    def mem_width_at(self, i: int) -> int:
        """titans: hidden width d_m of layer i's per-head memory MLP (on TLMConfig, which has d_head)."""
        return MIXERS.get("titans").components["mem"].at(self, i)


def _titans_shapes(cfg, prefix: str, l: int) -> Shapes:
    d, H, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    d_m = cfg.mem_width_at(l)
    out = {
        f"{prefix}.W_QKV.weight": (3 * H * dh, d),
        f"{prefix}.conv.weight": (3 * H * dh, 1, cfg.conv_kernel),
        f"{prefix}.W_rates.weight": (3 * H, d),
        f"{prefix}.W_rates.bias": (3 * H,),
        f"{prefix}.mem_W1": (H, d_m, dh),
        f"{prefix}.mem_W2": (H, dh, d_m),
        f"{prefix}.mem_norm.weight": (dh,),
        f"{prefix}.W_G.weight": (H * dh, d),
        f"{prefix}.W_M.weight": (d, H * dh),
        **attention_shapes(cfg, f"{prefix}.swa", l),
        **norm_shapes(cfg, f"{prefix}.norm_swa"),  # MAL: the SWA layer's own pre-norm over z = h + Mem(h)
    }
    return {**out, f"{prefix}.persistent": (cfg.mem_persistent, d)} if cfg.mem_persistent else out


def _titans_params(cfg, l: int) -> int:
    """Its memory layer (of H = n_heads heads in every layer): q/k/v 3·d·H·d_h, depthwise conv 3·H·d_h·k,
    rates 3·d·H + 3·H, memory initial weights 2·H·d_m·d_h, read-out norm d_h, gate d·H·d_h, output H·d_h·d,
    persistent tokens P·d; then the SWA layer's pre-norm and its softmax attention (of H_l heads)."""
    d, H, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    d_m = cfg.mem_width_at(l)
    memory = 3 * d * H * dh + 3 * H * dh * cfg.conv_kernel + 3 * d * H + 3 * H + 2 * H * d_m * dh
    memory += dh + d * H * dh + H * dh * d + cfg.mem_persistent * d
    return memory + NORM_PARAMS[cfg.norm] * d + attention_params(cfg, l)


def _titans_static(cfg, l: int) -> int:
    """Rate biases, the memory's initial weights, persistent tokens, the read-out norm, the SWA's norm."""
    H = cfg.n_heads
    return (3 * H + 2 * H * cfg.mem_width_at(l) * cfg.d_head + cfg.mem_persistent * cfg.d_model + cfg.d_head
            + NORM_PARAMS[cfg.norm] * cfg.d_model)


def _titans_context(cfg, seq_len: int) -> int:
    return min(seq_len, cfg.window) + cfg.mem_persistent


def _titans_memory_flops(cfg) -> int:
    """6·H·(11·d_m·d_h + 2·b·(d_m + d_h)) per token per layer (models/accounting.py says why)."""
    dh, b = cfg.d_head, cfg.mem_chunk
    return sum(6 * cfg.n_heads * (11 * d_m * dh + 2 * b * (d_m + dh))
               for d_m in map(cfg.mem_width_at, range(cfg.n_layers)))


# --- hope_attention (attention + a continuum memory system in place of the MLP; models/cms.py) ---


@dataclass(frozen=True)
class HopeSettings:
    """hope_attention (attention + a continuum memory system in place of the MLP; models/cms.py)."""

    cms_chunks: tuple[int, ...] = (16, 64, 256, 1024)
    """hope_attention: chunk size C_l (tokens) of each continuum-memory level, in chain order: level l
    updates its weights in context after every C_l tokens (the update applies from the next chunk on);
    a level with C_l >= max_seq_len never updates within a context and is a plain residual MLP."""
    cms_step_periods: tuple[int, ...] = ()
    """hope_attention, optional: the older optimizer-step reading of the CMS, on top of the in-context one:
    level l takes an AdamW step only every P_l optimizer steps (models/cms_steps.py); empty = every step."""

    def validate(self) -> None:
        if not self.cms_chunks or min(self.cms_chunks) < 1:
            raise ConfigError(f"cms_chunks must be one or more chunk sizes >= 1, got {list(self.cms_chunks)}")
        if self.cms_step_periods and (len(self.cms_step_periods) != len(self.cms_chunks)
                                      or min(self.cms_step_periods) < 1):
            raise ConfigError(f"cms_step_periods needs one period >= 1 per level ({len(self.cms_chunks)}), "
                              f"got {list(self.cms_step_periods)}")


def _cms_level(cfg, prefix: str, width: int, chunk: int, own_norm: bool) -> Shapes:
    """One continuum-memory level (models/cms.py): its MLP, its own pre-norm unless it reads ln2, and a
    step-size logit when it updates within a context (chunk < max_seq_len)."""
    out = {**(norm_shapes(cfg, f"{prefix}.norm") if own_norm else {}), **mlp_shapes(cfg, prefix, width)}
    return {**out, f"{prefix}.lr_logit": (1,)} if chunk < cfg.max_seq_len else out


def _cms_shapes(cfg, prefix: str, l: int) -> Shapes:
    """Levels 0..K-2 under mlp.levels.i, the last level is mlp itself; the first level reads the block's
    ln2, every later one owns its norm."""
    chunks, out = cfg.cms_chunks, {}
    for i, c in enumerate(chunks[:-1]):
        out.update(_cms_level(cfg, f"{prefix}.levels.{i}", cfg.d_ff[l], c, own_norm=i > 0))
    return {**out, **_cms_level(cfg, prefix, cfg.d_ff[l], chunks[-1], own_norm=len(chunks) > 1)}


def _cms_adaptive(cfg) -> int:
    return sum(c < cfg.max_seq_len for c in cfg.cms_chunks)


def _cms_flops(cfg) -> int:
    """Each adaptive level's inner gradient back-propagates the error through its MLP (W_out·r and one
    outer product per matrix: (M + 1)·d·d_l multiply-accumulates for M matrices; the forward it needs is
    the read, already in N_matmul), times 2 FLOPs, times 3 for forward + backward."""
    return 6 * (mlp_matrices(cfg) + 1) * cfg.d_model * _cms_adaptive(cfg) * sum(cfg.d_ff)


# --- the rows ---

_ATTENTION = "tlm_probe.models.attention:Attention"
ROWS = (
    MixerSpec(name="attention", help="", module=_ATTENTION, kv_cache=True,
              shapes=attention_shapes, params=attention_params),
    MixerSpec(name="gated_attention", help="per-head elementwise sigmoid output gate, Qiu et al. 2025 G1",
              module=_ATTENTION, kv_cache=True, output_gate=True,
              shapes=lambda cfg, p, l: attention_shapes(cfg, p, l, gated=True),
              params=lambda cfg, l: attention_params(cfg, l) + cfg.d_model * cfg.heads_at(l) * cfg.d_head),
    MixerSpec(name="titans", help="MAL: neural long-term memory, then sliding-window attention; "
              "models/titans.py", module="tlm_probe.models.titans:Titans", settings=TitansSettings,
              shapes=_titans_shapes, params=_titans_params, static_params=_titans_static,
              attention_context=_titans_context, inner_flops=_titans_memory_flops,
              # a quarter of the paper-scale presets' 4K context (our choice; the Titans paper does not fix
              # one window for its MAL language models); the CPU presets keep the default window
              paper_scale={"window": 1024}, training="tlm_probe.models.titans:MemoryClipLog",
              components={"mem": Component("layer_mem_width", lambda cfg: cfg.mem_expand * cfg.d_head, unit=8,
                                           counts="memory width")}),
    MixerSpec(name="hope_attention", help="attention + continuum memory system in place of the MLP; "
              "models/cms.py", module=_ATTENTION, settings=HopeSettings,
              shapes=attention_shapes, params=attention_params,
              mlp_module="tlm_probe.models.cms:ContinuumMemory", mlp_shapes=_cms_shapes,
              mlp_levels=lambda s: len(s.cms_chunks), splits_mlp="continuum-memory levels",
              adaptive_levels=_cms_adaptive, inner_flops=_cms_flops,
              training="tlm_probe.models.cms_steps:SlowLevels",
              retired={"cms_periods": "the old Hope-attention, a CMS chain without residuals updated on "
                       "optimizer steps; its weights do not fit the current continuum memory (cms_chunks)"}),
)
REFERENCE_MIXER = ROWS[0].name
"""The first row, softmax attention: TLMConfig's default mixer and the one --match-params sizes others to."""
MIXERS: Registry[MixerSpec] = Registry("mixer", {row.name: row for row in ROWS}, error=ConfigError)
"""cfg.mixer -> its row, in the order of config.json's settings and the --mixer help."""
SETTINGS = tuple(dict.fromkeys(row.settings for row in ROWS if row.settings is not None))
"""The settings classes, each once, in registry order: MixerSettings' bases, and config.json's order."""


@dataclass(frozen=True)
class MixerSettings(TitansSettings, HopeSettings):
    """Every mixer's settings in one class, TLMConfig's base. Its bases are named, not `*SETTINGS`, so that a
    type checker knows TLMConfig's fields; _check_settings holds them to the rows' SETTINGS at import."""


def _check_settings() -> None:
    """MixerSettings' bases are SETTINGS, in the rows' order; a row with new settings not listed there stops
    the import with the line to write."""
    if MixerSettings.__bases__ != SETTINGS:
        names = ", ".join(c.__name__ for c in SETTINGS)
        raise RuntimeError(f"models/mixer_registry.py: MixerSettings' bases must be the rows' settings "
                           f"classes, in their order: class MixerSettings({names})")


_check_settings()
MIXER_HELP = " | ".join(f"{r.name} ({r.help})" if r.help else r.name for r in ROWS)
"""TLMConfig.mixer's help: every row with its description."""


def owns(mixer: str, name: str) -> bool:
    """Whether the field `name` is one of the settings of `mixer`."""
    settings = MIXERS.get(mixer).settings
    return settings is not None and name in {f.name for f in fields(settings)}
