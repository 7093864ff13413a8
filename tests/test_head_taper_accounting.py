"""Accounting of per-layer heads (issue 23): parameters equal numel on the meta device for every component
taper x preset x mixer; training FLOPs and KV-cache bytes against independent counts; the head and
key/value schedules keep their budgets exactly (checked against brute force), or refuse in one line."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tlm_probe.models.accounting import (
    count_params,
    kv_cache_bytes_per_token,
    matmul_params,
    train_flops_per_token,
)
from tlm_probe.models.config import ConfigError, TLMConfig, config_with_schedule
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.presets import PRESETS, preset_config
from tlm_probe.models.shapes import state_shapes
from tlm_probe.models.tlm import TaperedLM
from tlm_probe.schedules.heads import _snap, head_counts, kv_counts, split_components
from tlm_probe.schedules.widths import SCHEDULES, ScheduleError, parse_schedule

# component tapers: (MLP schedule, heads schedule, kv schedule); presets get n_kv_heads = n_heads / 2 so
# that a key/value taper has room (with n_kv_heads = n_heads it can only equal uniform, and is refused)
# (MLP, heads, kv, Titans memory width)
TAPERS = {
    "mlp": ("cosine:1.5:0.5", None, None, None),
    "heads": ("uniform", "cosine:1.5:0.5", None, None),
    "kv": ("uniform", None, "cosine:1.5:0.5", None),
    "heads+kv": ("uniform", "cosine:1.5:0.5", "cosine:1.5:0.5", None),
    "mlp+heads": ("cosine:1.5:0.5", "linear:1.5:0.5", None, None),
    "mem": ("uniform", None, None, "cosine:1.5:0.5"),  # titans only
    "heads+mem": ("uniform", "cosine:1.5:0.5", None, "sigmoid:1.5:0.5"),  # titans only
}


def _preset(name, mixer, taper):
    mlp, heads, kv, mem = TAPERS[taper]
    return preset_config(name, mlp, mixer, heads=heads, kv=kv, mem=mem,
                         n_kv_heads=PRESETS[name]["n_heads"] // 2)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("mixer", tuple(MIXERS))
def test_accounting_equals_numel_on_meta_for_every_component_taper(preset, mixer):
    uniform = _preset(preset, mixer, "mlp").replace(d_ff=(PRESETS[preset]["d_ff"] // _levels(mixer),)
                                                    * PRESETS[preset]["n_layers"])
    ref = (count_params(uniform).total, train_flops_per_token(uniform), kv_cache_bytes_per_token(uniform))
    for taper in TAPERS:
        if "mem" in taper and mixer != "titans":
            continue
        cfg = _preset(preset, mixer, taper)
        with torch.device("meta"):
            model = TaperedLM(cfg)  # no memory allocated
        assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total, taper
        assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == state_shapes(cfg), taper
        if "heads" in taper:
            assert len(set(cfg.layer_heads)) > 1, taper  # the taper did something
        if "mem" in taper:
            assert len(set(cfg.layer_mem_width)) > 1, taper
        got = (count_params(cfg).total, train_flops_per_token(cfg), kv_cache_bytes_per_token(cfg))
        assert got == ref, taper  # every component taper keeps params, FLOPs and KV bytes exactly


def _levels(mixer):
    return len(TLMConfig.cms_chunks) if mixer == "hope_attention" else 1


def _tiny(**kw):
    base = dict(vocab_size=61, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=16)
    return config_with_schedule(parse_schedule("uniform", 16), 64, **{**base, **kw})


def test_matmul_flops_equal_torch_flop_counter_on_a_head_taper():
    """6·N_matmul per token against torch's own count of forward + backward matmul FLOPs (an
    independent count; its CPU path does not count SDPA, so the attention term is checked by hand)."""
    cfg = _tiny(heads="cosine:1.5:0.5")
    assert cfg.layer_heads == (6, 4, 4, 2) and cfg.layer_kv_heads == (3, 2, 2, 1)
    model = TaperedLM(cfg)
    x = torch.randint(0, 61, (2, 16))
    with FlopCounterMode(display=False) as fc:
        model(x).sum().backward()
    assert fc.get_total_flops() == 6 * matmul_params(cfg) * x.numel()
    # attention scores and values, 6·T·Σ_l h_l·d_head (Kaplan's causal count) with heads (6, 4, 4, 2)
    assert train_flops_per_token(cfg, 16) - 6 * matmul_params(cfg) == 6 * 16 * (6 + 4 + 4 + 2) * 8


def test_kv_bytes_equal_the_cache_a_forward_fills():
    """Σ_l 2·kv_l·d_head·bytes per token against the bytes of the keys and values a DynamicCache holds."""
    from transformers.cache_utils import DynamicCache

    cfg = _tiny(heads="cosine:1.5:0.5", kv="linear:1.5:0.5")
    model = TaperedLM(cfg).eval()
    cache = DynamicCache()
    with torch.no_grad():
        model(torch.randint(0, 61, (1, 10)), past_key_values=cache)
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert held == 10 * kv_cache_bytes_per_token(cfg, bytes_per_value=4)  # float32 cache
    assert [layer.keys.shape[1] for layer in cache.layers] == list(cfg.layer_kv_heads)


SIZES = [(8, 8, 4), (12, 16, 4), (5, 6, 3), (24, 16, 16)]  # (L, n_heads, kv_heads)


@pytest.mark.parametrize("L, H, KV", SIZES)
def test_every_schedule_keeps_the_head_budget_exactly(L, H, KV):
    group = H // KV
    for name in SCHEDULES:
        if name in ("explicit", "file") or (name.startswith("wider") and L < 3):
            continue
        try:
            heads, kv = head_counts(name, L, H, KV)
        except ScheduleError as e:  # refused in one line, naming the impossibility
            assert "impossible" in str(e) or "no width" in str(e), (name, e)
            continue
        assert sum(heads) == L * H and sum(kv) == L * KV, name
        assert all(h % group == 0 and h == g * group for h, g in zip(heads, kv, strict=True)), name


def _brute_force(heads, targets, total):
    """The least-squares exact divisor counts by enumeration, with the monotone direction of targets."""
    best = None
    down = all(a >= b for a, b in itertools.pairwise(targets))
    for ks in itertools.product(*[[d for d in range(1, h + 1) if h % d == 0] for h in heads]):
        if sum(ks) != total or (down and any(a < b for a, b in itertools.pairwise(ks))):
            continue
        cost = sum((k - t) ** 2 for k, t in zip(ks, targets, strict=True))
        best = min(best, (cost, ks)) if best else (cost, ks)
    return best


@pytest.mark.parametrize("heads, targets", [
    ((8,) * 6, (4, 4, 3, 2, 1, 1)), ((12, 12, 8, 8, 4), (5, 4, 3, 2, 1)), ((6, 6, 6, 6), (4, 3, 3, 2)),
])
def test_kv_snap_equals_brute_force(heads, targets):
    cost, ks = _brute_force(heads, targets, sum(targets))
    got = _snap(heads, targets, sum(targets))
    assert sum(got) == sum(targets) and all(h % k == 0 for h, k in zip(heads, got, strict=True))
    assert sum((k - t) ** 2 for k, t in zip(got, targets, strict=True)) == cost


def test_kv_schedule_divides_each_layers_heads_and_keeps_the_total():
    heads = [8] * 8
    kv = kv_counts("cosine:1.5:0.5", heads, 4)
    assert sum(kv) == 32 and all(8 % k == 0 for k in kv) and kv == sorted(kv, reverse=True)


@pytest.mark.parametrize("call, match", [
    (lambda: kv_counts("cosine:1.5:0.5", [16] * 24, 16), "only counts .* uniform's"),  # MHA: kv_l <= h_l
    (lambda: kv_counts("cosine:1.5:0.5", [4] * 4, 1), "impossible"),  # MQA: a layer would get 0
    (lambda: kv_counts("3,2,2,1", [4] * 4, 2), "do not divide"),  # explicit counts are never moved
    (lambda: head_counts("cosine:1.5:0.5", 4, 4, 1), "impossible"),  # one group of 4: 0.5 groups
    (lambda: head_counts("6,6,2,3", 4, 4, 4), "budget"),
    (lambda: head_counts("middle", 6, 8, 8), "0 query heads"),
    (lambda: split_components("heads=cosine+mlp"), "COMPONENT=SPEC"),
    (lambda: split_components("heads=cosine+heads=linear"), "twice"),
])
def test_impossible_budgets_are_refused_in_one_line(call, match):
    with pytest.raises(ScheduleError, match=match) as e:
        call()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw, match", [
    (dict(layer_heads=(4, 4, 4)), "layer_heads has 3 entries"),
    (dict(layer_kv_heads=(2, 0, 2, 2)), ">= 1"),
    (dict(layer_mem_width=(8, 8, 8, 8)), "mixer=attention has none"),
    (dict(layer_mem_width=(8, 8, 0, 8), mixer="titans"), ">= 1"),
    (dict(layer_heads=(6, 4, 4, 2), layer_kv_heads=(4, 2, 2, 2)), "layer 0: 6 query heads"),
    (dict(layer_heads=(6, 4, 4, 2)), "layer 0: 6 query heads are not divisible by its 4"),
])
def test_bad_per_layer_heads(kw, match):
    with pytest.raises(ConfigError, match=match):
        TLMConfig(vocab_size=61, d_model=32, n_layers=4, n_heads=4, d_ff=(64,) * 4, **kw)


def test_config_json_round_trip_and_old_configs_unchanged():
    old = TLMConfig(vocab_size=61, d_model=32, n_layers=4, n_heads=4, d_ff=(64,) * 4)
    assert "layer_heads" not in old.to_dict() and "layer_kv_heads" not in old.to_dict()  # bytes as before
    assert old.heads_at(3) == 4 and old.kv_heads_at(3) == 4
    cfg = _tiny(heads="cosine:1.5:0.5")
    back = TLMConfig.from_dict(cfg.to_dict())
    assert back == cfg and back.layer_heads == (6, 4, 4, 2) and back.schedule["heads"]["name"] == "cosine"
    with pytest.raises(ConfigError, match="layer_heads must be a list of integers"):
        TLMConfig.from_dict({**cfg.to_dict(), "layer_heads": "6442"})


def test_titans_memory_width_taper_keeps_the_budget_and_counts_its_inner_loop():
    """Titans' memory FLOPs per layer by hand, 6·H·(11·d_m·d_h + 2·b·(d_m + d_h)), summed over the layers'
    own widths, and the memory's initial weights (H·d_m·d_h twice) in each block's parameters."""
    kw = dict(vocab_size=61, d_model=64, n_layers=6, n_heads=4, max_seq_len=32, mixer="titans", window=6,
              mem_chunk=4)
    cfg = config_with_schedule("uniform", 128, mem="cosine:1.5:0.5", **kw)
    flat = config_with_schedule("uniform", 128, **kw)
    assert cfg.layer_mem_width == (48, 48, 40, 24, 16, 16) and flat.mem_width_at(3) == 32  # 2·d_head
    from tlm_probe.models.accounting import inner_flops_per_token

    by_hand = sum(6 * 4 * (11 * m * 16 + 2 * 4 * (m + 16)) for m in cfg.layer_mem_width)
    assert inner_flops_per_token(cfg) == by_hand == inner_flops_per_token(flat)
    pairs = zip(count_params(cfg).layers, count_params(flat).layers, strict=True)
    diff = [a.total - b.total for a, b in pairs]
    assert diff == [2 * 4 * (m - 32) * 16 for m in cfg.layer_mem_width]
    with pytest.raises(ConfigError, match="tapers the Titans memory"):
        config_with_schedule("uniform", 128, mem="cosine", **{**kw, "mixer": "attention"})
