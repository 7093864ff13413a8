"""`tlm schedule`: per-layer MLP widths (or query heads, or key/value heads: --component) of a schedule,
with parameter, FLOP and KV-cache parity against uniform."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from tlm_probe.commands.common import command, console, err_console, print_json
from tlm_probe.commands.schedule_heads import head_result, print_head_table
from tlm_probe.errors import UserError
from tlm_probe.models.accounting import comparison, count_params
from tlm_probe.models.config import MIXER_KINDS, TLMConfig, config_with_schedule
from tlm_probe.models.presets import preset_config
from tlm_probe.schedules.heads import COMPONENTS
from tlm_probe.schedules.rules import Rule
from tlm_probe.schedules.widths import (
    DEFAULTS,
    FILE,
    GROUPED,
    PARAMS,
    ScheduleSpec,
    make_schedule,
    parse_schedule,
)


def register(app: typer.Typer) -> None:
    @command(app, "schedule", "tlm schedule --layers 24 --d-ff 4096 --schedule cosine --start 1.5 --end 0.5")
    def schedule(
        layers: int = typer.Option(None, help="Number of layers L.", show_default="24"),
        d_ff: int = typer.Option(None, "--d-ff", help="Uniform MLP width; the budget is L·d_ff.",
                                 show_default="4096; with --from-probe the probed model's mean width"),
        schedule: str = typer.Option("cosine", help="uniform|linear|cosine|sigmoid|openelm[:S:E]|"
                                     "middle[:FRACTION]|hourglass[:WAIST:DEPTH]|wider-early|wider-middle|"
                                     "wider-late, explicit widths '4096,4096,...' (0: no MLP), or a "
                                     "schedule file 'x.json'."),
        start: float = typer.Option(None, help="Start ratio r_s (tapers).", show_default="1.5"),
        end: float = typer.Option(None, help="End ratio r_e (tapers).", show_default="0.5"),
        steepness: float = typer.Option(None, help="Sigmoid steepness.", show_default="10"),
        wide_factor: float = typer.Option(None, help="Width ratio of the wide third (grouped).",
                                          show_default="1.5"),
        multiple_of: int = typer.Option(64, help="Round every width to a multiple of this."),
        d_model: int = typer.Option(None, help="Residual width, for the parameter accounting.",
                                    show_default="1024"),
        vocab_size: int = typer.Option(None, help="Vocabulary size, for the parameter accounting.",
                                       show_default="32000"),
        mlp: str = typer.Option(None, help="swiglu | gelu (3·d·d_l or 2·d·d_l MLP weights).",
                             show_default="swiglu"),
        seq_len: int = typer.Option(None, help="Context length for the attention FLOP term.",
                                 show_default="4096"),
        preset: str = typer.Option(None, help="A model preset (tlm-440m, ...): its layers, widths and "
                                   "architecture; the flags above (but --multiple-of) "
                                   "are refused beside it."),
        mixer: str = typer.Option("attention", help="Token mixer: " + " | ".join(MIXER_KINDS) + "."),
        component: str = typer.Option("mlp", help="What --schedule tapers: mlp (MLP width d_l) | heads "
                                      "(query heads, in units of one GQA group) | kv (key/value heads, "
                                      "each dividing its layer's query heads) | mem (--mixer titans: the "
                                      "memory MLP's hidden width, multiples of 8)."),
        heads: int = typer.Option(None, "--heads", help="Query heads per layer of uniform.",
                                  show_default="d_model // 64"),
        kv_heads: int = typer.Option(None, "--kv-heads", help="Key/value heads per layer of uniform "
                                     "(allowed beside --preset).",
                                     show_default="--heads, plain multi-head attention"),
        json_out: bool = typer.Option(False, "--json", help="Print a JSON object instead of a table."),
        from_probe: Path = typer.Option(None, "--from-probe", help="A probe result folder: widths (or, with "
                                        "--component heads, query heads) ∝ a function of its per-layer "
                                        "--statistic (writes --out FILE.json)."),
        statistic: str = typer.Option(None, help="--from-probe: the per-layer statistic (e.g. "
                                      "ablation_dnll_mlp_zero, align_mlp_mid, taylor_mlp, effective_rank)."),
        rule: str = typer.Option("x", help="--from-probe: f in widths ∝ max(0, f(x))^power: x | 1-x | abs | "
                                 "-x | 1+x."),
        power: float = typer.Option(1.0, help="--from-probe: exponent on the weights."),
        min_ratio: float = typer.Option(0.25, help="--from-probe: smallest d_l/d_ff (0 allows no MLP)."),
        max_ratio: float = typer.Option(2.0, help="--from-probe: largest d_l/d_ff."),
        monotone: str = typer.Option("none", help="--from-probe: none | decreasing | increasing "
                                     "(isotonic projection of the weights)."),
        model: str = typer.Option(None, help="--from-probe: the model, when the probe holds several."),
        out: Path = typer.Option(None, "--out", "-o", help="--from-probe: the schedule file to write."),
    ):
        """Print the per-layer MLP widths of a schedule and its parameter/FLOP parity with uniform.

        With --from-probe PROBE_DIR --statistic NAME --out FILE.json: derive the widths from a probe and
        write a schedule file that `tlm train/compare/sweep --schedule FILE.json` accept."""
        if mixer not in MIXER_KINDS:
            raise UserError(f"unknown mixer {mixer!r}; choose one of: {', '.join(MIXER_KINDS)}")
        if component not in COMPONENTS:
            raise UserError(f"unknown component {component!r}; choose one of: {', '.join(COMPONENTS)}")
        if from_probe is not None:
            how = Rule(rule, power, min_ratio, max_ratio, monotone)
            if component == "mlp":
                schedule, layers, d_ff = _from_probe(from_probe, statistic, how, out, d_ff, multiple_of,
                                                     model, preset)
            else:
                unit = _probe_head_unit(component, heads, kv_heads, min_ratio)
                schedule, layers, _ = _from_probe(from_probe, statistic, how, out, heads, unit, model, preset)
        spec = _spec(schedule, start, end, steepness, wide_factor, multiple_of)
        flat = ScheduleSpec(name="uniform", multiple_of=multiple_of)  # the same rounding on both sides
        arch = dict(n_layers=layers, d_ff=d_ff, d_model=d_model, vocab_size=vocab_size, mlp=mlp,
                    max_seq_len=seq_len, n_heads=heads, n_kv_heads=kv_heads)
        mlp_spec, taper = (spec, {}) if component == "mlp" else (flat, {component: spec})
        if preset:
            # --kv-heads may join a preset (its attention is multi-head): the grouping a kv taper needs
            gqa = {"n_kv_heads": arch.pop("n_kv_heads")} if kv_heads is not None else {}
            _refuse_beside_preset(preset, arch)
            tapered = preset_config(preset, mlp_spec, mixer, **taper, **gqa)
            uniform = preset_config(preset, flat, mixer, **gqa)
            seq_len = tapered.max_seq_len
        else:
            base = {**ARCH_DEFAULTS, **{k: v for k, v in arch.items() if v is not None}, "mixer": mixer}
            d_ff, seq_len = base.pop("d_ff"), base["max_seq_len"]
            base.setdefault("n_heads", max(1, base["d_model"] // 64))
            tapered = config_with_schedule(mlp_spec, d_ff, **base, **taper)
            uniform = config_with_schedule(flat, d_ff, **base)
        head = {"preset": preset, "mixer": mixer, "component": component}
        if component != "mlp":
            result = {**head, **head_result(component, spec, tapered, uniform, seq_len)}
            print_json(result) if json_out else print_head_table(result)
            return
        sched = make_schedule(spec, tapered.n_layers, tapered.schedule["d_ff"])
        result = {**head, **_result(sched, tapered, uniform, seq_len)}
        if json_out:
            print_json(result)
        else:
            _print_table(result, tapered)


def _from_probe(probe_dir, statistic, rule, out, d_ff, multiple_of, model, preset) -> tuple[str, int, int]:
    from tlm_probe.commands.schedule_from_probe import write_from_probe

    if statistic is None:
        raise UserError("--from-probe needs --statistic NAME")
    if preset:
        raise UserError("--from-probe takes its layers from the probe: drop --preset")
    path, layers, d_ff = write_from_probe(probe_dir, statistic, rule, out, d_ff, multiple_of, model)
    err_console.print(f"wrote schedule file {path}", markup=False, highlight=False)
    return str(path), layers, d_ff


def _probe_head_unit(component: str, heads: int | None, kv_heads: int | None, min_ratio: float) -> int:
    """--from-probe --component heads: the checks made before the file is written, and the unit (one GQA
    group of query heads) its counts are rounded to."""
    if component != "heads":  # a derived kv count need not divide its layer's query heads
        raise UserError(f"--from-probe derives --component heads (each layer's key/value heads follow its "
                        f"GQA groups) or MLP widths; give {component} values explicitly or as a shape")
    if heads is None:
        raise UserError("--from-probe --component heads needs --heads (uniform's query heads per layer)")
    if kv_heads is not None and (kv_heads < 1 or heads % kv_heads):
        raise UserError(f"--heads {heads} is not divisible by --kv-heads {kv_heads}")
    if min_ratio <= 0:
        raise UserError("--component heads: every layer needs >= 1 query head; --min-ratio must be > 0")
    return heads // (kv_heads or heads)


FLAG_DEFAULTS = {"start": 1.5, "end": 0.5, "steepness": 10.0, "wide_factor": 1.5}
# the parameters each schedule reads, in the order of its spec string (name:p1:p2:...); explicit widths and
# schedule files none
USES = {**PARAMS, "explicit": (), FILE: ()}
# defaults of the architecture flags without --preset (the flags are None when not given)
ARCH_DEFAULTS = dict(n_layers=24, d_ff=4096, d_model=1024, vocab_size=32000, mlp="swiglu", max_seq_len=4096)
ARCH_FLAGS = dict(n_layers="--layers", d_ff="--d-ff", d_model="--d-model", vocab_size="--vocab-size",
                  mlp="--mlp", max_seq_len="--seq-len", n_heads="--heads", n_kv_heads="--kv-heads")


def _refuse_beside_preset(preset: str, arch: dict) -> None:
    given = [ARCH_FLAGS[k] for k, v in arch.items() if v is not None]
    if given:  # the preset fixes them: a flag beside it would be ignored, so say so instead
        raise UserError(f"--preset {preset} sets the architecture; drop {', '.join(given)}")


def _check_used(text: str, spec: ScheduleSpec, given: dict) -> None:
    """Refuse what the schedule would ignore: extra spec-string numbers, or flags it does not read."""
    uses = USES[spec.name]
    n_given = len(text.split(":")) - 1
    if n_given > len(uses):
        takes = f"{len(uses)} parameter{'s' * (len(uses) != 1)}" + (f" ({':'.join(uses)})" if uses else "")
        raise UserError(f"--schedule {text!r}: {spec.name} takes {takes}, got {n_given}")
    unused = [f"--{k.replace('_', '-')}" for k in given if k not in uses]
    if unused and spec.name not in ("explicit", FILE):
        raise UserError(f"--schedule {spec.name} does not use {', '.join(unused)}; drop it")


def _spec(text, start, end, steepness, wide_factor, multiple_of) -> ScheduleSpec:
    spec = parse_schedule(text, multiple_of)
    given = {k: v for k, v in dict(start=start, end=end, steepness=steepness, wide_factor=wide_factor).items()
             if v is not None}
    _check_used(text.strip(), spec, given)
    fixed = ":" in text or spec.name in ("explicit", FILE)  # the spec text holds every number
    if given and fixed:  # two sources for one number: refuse, not pick
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in given)
        raise UserError(f"--schedule {text!r} already sets its parameters; drop {flags}")
    if fixed:
        return spec
    defaults = {**FLAG_DEFAULTS, **DEFAULTS.get(spec.name, {})}
    return ScheduleSpec(name=spec.name, multiple_of=multiple_of, **{**defaults, **given})


def _result(sched, tapered: TLMConfig, uniform: TLMConfig, seq_len: int) -> dict:
    pc, pu = count_params(tapered), count_params(uniform)
    return {
        "schedule": sched.spec.to_dict(),
        "layers": sched.n_layers,
        "d_ff": sched.d_ff,
        "widths": list(sched.widths),
        "ratios": [w / sched.d_ff for w in sched.widths],
        "effective_start": sched.effective_start,
        "effective_end": sched.effective_end,
        "total": sched.total,
        "monotone": sched.monotone,
        "no_mlp_layers": list(sched.no_mlp_layers),
        "moved": sched.moved,
        "uniform_total": sched.uniform_total,
        "layer_params": [l.total for l in pc.layers],
        "uniform_layer_params": [l.total for l in pu.layers],
        "mlp_params": pc.mlp,
        "uniform_mlp_params": pu.mlp,
        **comparison(tapered, uniform, seq_len),
    }


def _print_table(r: dict, cfg: TLMConfig) -> None:
    what = f"{r['preset']} ({r['mixer']})" if r["preset"] else r["mixer"]
    table = Table(title=f"{what}: {r['schedule']['name']} schedule, L={r['layers']}, d_ff={r['d_ff']}"
                  + (f" per level x {cfg.cms_levels} levels" if cfg.cms_levels > 1 else ""))
    for col in ("layer", "depth", "width", "ratio", "block params", "uniform block params"):
        table.add_column(col, justify="right")
    L = r["layers"]
    rows = zip(r["widths"], r["ratios"], r["layer_params"], r["uniform_layer_params"], strict=True)
    for l, (w, ratio, p, u) in enumerate(rows):
        table.add_row(str(l), f"{l / max(L - 1, 1):.3f}", str(w), f"{ratio:.3f}", f"{p:,}", f"{u:,}")
    console.print(table)
    console.print(f"widths total {r['total']:,} (uniform {r['uniform_total']:,}); effective ratios "
                  f"{r['effective_start']:.3f} -> {r['effective_end']:.3f}")
    console.print(f"params {r['params']:,} vs uniform {r['uniform_params']:,}; train FLOPs/token "
                  f"{r['flops_per_token']:,} vs {r['uniform_flops_per_token']:,}; KV-cache bytes/token "
                  f"{r['kv_bytes_per_token']:,} vs {r['uniform_kv_bytes_per_token']:,}; "
                  f"parity: {'yes' if r['parity'] else 'NO'}")
    console.print(f"shape: {r['monotone']}; width moved from uniform: {r['moved']:,}")
    if r["no_mlp_layers"]:
        console.print(f"blocks with no MLP (d_l = 0): {', '.join(map(str, r['no_mlp_layers']))}")
    if r["schedule"]["name"] in GROUPED:
        console.print(GROUPED_NOTE)


GROUPED_NOTE = ("grouped controls: thirds by (3·l)//L; every control moves the same width "
                "round((wide_factor - 1)·d_ff·L/3) into its third, also when L % 3 != 0 (thirds of "
                "unequal size: per-layer gains then differ between controls, the total does not)")
