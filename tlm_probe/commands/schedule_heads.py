"""`tlm schedule --component heads|kv`: per-layer query / key-value heads of a schedule and their parity
(parameters, training FLOPs, KV-cache bytes) with uniform."""

from __future__ import annotations

from tlm_probe.commands.common import console
from tlm_probe.commands.tables import print_fitted
from tlm_probe.models.accounting import comparison, count_params, kv_cache_bytes_per_token
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.schedules.widths import ScheduleSpec, monotone_label

# component -> (per-layer value of a config, uniform's value, what the values count); a mixer's own
# component (mem) is read off its row
COUNTS = {
    "heads": (TLMConfig.heads_at, lambda c: c.n_heads, "query heads"),
    "kv": (TLMConfig.kv_heads_at, lambda c: c.kv_heads, "key/value heads"),
}


def head_result(component: str, spec: ScheduleSpec, tapered: TLMConfig, uniform: TLMConfig,
                seq_len: int) -> dict:
    comp = MIXERS.get(tapered.mixer).components.get(component)
    at, flat, what = COUNTS[component] if component in COUNTS else (comp.at, comp.uniform, comp.counts)
    L, base = tapered.n_layers, flat(uniform)
    values = [at(tapered, l) for l in range(L)]
    pc, pu = count_params(tapered), count_params(uniform)
    return {
        "schedule": {**spec.to_dict(), **tapered.schedule.get(component, {})},
        "layers": L,
        "counts": what,
        "uniform_value": base,
        "values": values,
        "ratios": [v / base for v in values],
        "heads": [tapered.heads_at(l) for l in range(L)],
        "kv_heads": [tapered.kv_heads_at(l) for l in range(L)],
        "total": sum(values),
        "uniform_total": L * base,
        "monotone": monotone_label(values),
        "layer_params": [l.total for l in pc.layers],
        "uniform_layer_params": [l.total for l in pu.layers],
        "layer_kv_bytes": [kv_cache_bytes_per_token(_one_layer(tapered, l)) for l in range(L)],
        **comparison(tapered, uniform, seq_len),
    }


def _one_layer(cfg: TLMConfig, l: int) -> TLMConfig:
    """Layer l alone (its heads, one layer), for its share of the KV-cache bytes."""
    return cfg.replace(n_layers=1, d_ff=(cfg.d_ff[l],), layer_heads=(cfg.heads_at(l),),
                       layer_kv_heads=(cfg.kv_heads_at(l),), layer_mem_width=())


def print_head_table(r: dict) -> None:
    what = f"{r['preset']} ({r['mixer']})" if r["preset"] else r["mixer"]
    title = (f"{what}: {r['schedule']['name']} schedule of {r['counts']}, L={r['layers']}, "
             f"uniform {r['uniform_value']}")
    columns = ("layer", "depth", "heads", "kv heads", r["counts"], "ratio", "KV bytes/token", "block params",
               "uniform block params")
    L = r["layers"]
    per_layer = zip(r["heads"], r["kv_heads"], r["values"], r["ratios"], r["layer_kv_bytes"],
                    r["layer_params"], r["uniform_layer_params"], strict=True)
    rows = [(str(l), f"{l / max(L - 1, 1):.3f}", str(h), str(kv), str(v), f"{ratio:.3f}", f"{kvb:,}",
             f"{p:,}", f"{u:,}") for l, (h, kv, v, ratio, kvb, p, u) in enumerate(per_layer)]
    print_fitted(console, title, columns, rows)  # split, never cut, at the console's width
    console.print(f"{r['counts']} total {r['total']:,} (uniform {r['uniform_total']:,})")
    console.print(f"params {r['params']:,} vs uniform {r['uniform_params']:,}; train FLOPs/token "
                  f"{r['flops_per_token']:,} vs {r['uniform_flops_per_token']:,}; KV-cache bytes/token "
                  f"{r['kv_bytes_per_token']:,} vs {r['uniform_kv_bytes_per_token']:,}; "
                  f"parity: {'yes' if r['parity'] else 'NO'}")
    console.print(f"shape: {r['monotone']}")
