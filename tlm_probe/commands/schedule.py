"""`tlm schedule`: per-layer MLP widths (or query heads, or key/value heads: --component) of a schedule,
with parameter, FLOP and KV-cache parity against uniform."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.table import Table

from tlm_probe.commands.common import command, console, err_console, print_json
from tlm_probe.commands.flags import JsonOut
from tlm_probe.commands.options import flag_of, with_options
from tlm_probe.commands.schedule_heads import head_result, print_head_table
from tlm_probe.errors import UserError
from tlm_probe.models.accounting import comparison, count_params
from tlm_probe.models.config import TLMConfig, config_with_schedule
from tlm_probe.models.mixer_registry import MIXERS
from tlm_probe.models.presets import preset_config
from tlm_probe.ranges import check_values
from tlm_probe.schedules.options import FromProbeOptions, ScheduleOptions
from tlm_probe.schedules.widths import FILE, SCHEDULES, ScheduleSpec, make_schedule, parse_schedule


@dataclass(frozen=True, kw_only=True)
class ScheduleArch:
    """The model a schedule is accounted on: a --preset, or these fields. A field left at None is derived:
    from --from-probe (its layers, its mean width) where there is one, else SCHEDULE_ARCH."""

    n_layers: int | None = None
    """Number of layers L (default: 24; with --from-probe the probe's)."""
    d_ff: int | None = None
    """Uniform MLP width; the budget is L·d_ff (default: 4096; with --from-probe the probed model's mean
    width)."""
    d_model: int | None = None
    """Residual width, for the parameter accounting (default: 1024)."""
    vocab_size: int | None = None
    """Vocabulary size, for the parameter accounting (default: 32000; 0 also gives it)."""
    mlp: str | None = None
    """swiglu | gelu (3·d·d_l or 2·d·d_l MLP weights; default: swiglu)."""
    seq_len: int | None = None
    """Context length for the attention FLOP term (default: 4096; 0 also gives it)."""
    preset: str | None = None
    """A model preset (tlm-440m, ...): its layers, widths and architecture; the flags above (but
    --multiple-of) are refused beside it."""
    mixer: str = field(default="attention", metadata={"help": f"Token mixer: {' | '.join(MIXERS)}."})
    """Token mixer (MIXERS)."""
    n_heads: int | None = None
    """Query heads per layer of uniform (default: d_model // 64)."""
    n_kv_heads: int | None = None
    """Key/value heads per layer of uniform (allowed beside --preset; default: --heads, plain multi-head
    attention; 0: --heads)."""

    def __post_init__(self) -> None:
        check_values(self)  # ranges.py's, one range per concept in every command
        MIXERS.check(self.mixer)
        for key in DERIVED_AT_ZERO:  # 0 says "derive it" here as in train and probe: the default below
            if getattr(self, key) == 0:
                object.__setattr__(self, key, None)

    def given(self) -> dict[str, Any]:
        """The architecture fields set by flag, under TLMConfig's names."""
        return {CONFIG_NAMES.get(k, k): v for k, v in dataclasses.asdict(self).items()
                if k in ARCH_FLAGS and v is not None}


# defaults of the architecture flags without --preset (the flags are None when not given; their help
# states them, and tests/test_schedules.py checks that it states these)
SCHEDULE_ARCH = dict(n_layers=24, d_ff=4096, d_model=1024, vocab_size=32000, mlp="swiglu", max_seq_len=4096)
ARCH_FLAGS = {name: flag_of(name) for name in ("n_layers", "d_ff", "d_model", "vocab_size", "mlp", "seq_len",
                                                "n_heads", "n_kv_heads")}
CONFIG_NAMES = {"seq_len": "max_seq_len"}
"""ScheduleArch field -> TLMConfig field, where they differ."""
DERIVED_AT_ZERO = ("vocab_size", "seq_len", "n_kv_heads")
"""The fields whose range (ranges.py) takes 0 ("derive it", "--heads"): 0 is as if not given."""


def register(app: typer.Typer) -> None:
    @command(app, "schedule", "tlm schedule --layers 24 --d-ff 4096 --schedule cosine --start 1.5 --end 0.5")
    @with_options(arch=ScheduleArch, options=ScheduleOptions, probe=FromProbeOptions, run=JsonOut)
    def schedule(*, arch: ScheduleArch, options: ScheduleOptions, probe: FromProbeOptions, run: JsonOut):
        """Print the per-layer MLP widths of a schedule and its parameter/FLOP parity with uniform.

        With --from-probe PROBE_DIR --statistic NAME --out FILE.json: derive the widths from a probe and
        write a schedule file that `tlm train/compare/sweep --schedule FILE.json` accept."""
        component, derived = options.component, None
        if probe.from_probe is not None:
            derived = _from_probe(probe, arch, options)
            spec = derived.spec
            probed = derived.data["source"].get("probed_model", {})  # its d_model and vocabulary
            arch = dataclasses.replace(arch, n_layers=derived.n_layers,
                                       d_ff=derived.d_ff if component == "mlp" else arch.d_ff,
                                       d_model=arch.d_model or probed.get("d_model"),
                                       vocab_size=arch.vocab_size or probed.get("vocab_size"))
        else:
            spec = _spec(options)
        result, tapered = schedule_result(spec, arch, component)
        if derived is not None:  # the model it describes was built: only now is the file written
            path = derived.write()
            err_console.print(f"wrote schedule file {path}", markup=False, highlight=False)
        if run.json_out:
            print_json(result)
        elif component != "mlp":
            print_head_table(result)
        else:
            _print_table(result, tapered)


def schedule_result(spec: ScheduleSpec, arch: ScheduleArch, component: str) -> tuple[dict, TLMConfig]:
    """(the printed result, the tapered config) of a schedule of `component` on the model `arch`."""
    flat = ScheduleSpec(name="uniform", multiple_of=spec.multiple_of)  # the same rounding on both sides
    mlp_spec, taper = (spec, {}) if component == "mlp" else (flat, {component: spec})
    given = arch.given()
    if arch.preset:
        # --kv-heads may join a preset (its attention is multi-head): the grouping a kv taper needs
        gqa = {"n_kv_heads": given.pop("n_kv_heads")} if "n_kv_heads" in given else {}
        if given:  # the preset fixes them: a flag beside it would be ignored, so say so instead
            flags = ", ".join(ARCH_FLAGS[k] for k in ARCH_FLAGS if CONFIG_NAMES.get(k, k) in given)
            raise UserError(f"--preset {arch.preset} sets the architecture; drop {flags}")
        tapered = preset_config(arch.preset, mlp_spec, arch.mixer, **taper, **gqa)
        uniform = preset_config(arch.preset, flat, arch.mixer, **gqa)
    else:
        base = {**SCHEDULE_ARCH, **given, "mixer": arch.mixer}
        d_ff = base.pop("d_ff")
        base.setdefault("n_heads", max(1, base["d_model"] // 64))
        tapered = config_with_schedule(mlp_spec, d_ff, **base, **taper)
        uniform = config_with_schedule(flat, d_ff, **base)
    head = {"preset": arch.preset, "mixer": arch.mixer, "component": component}
    seq_len = tapered.max_seq_len
    if component != "mlp":
        return {**head, **head_result(component, spec, tapered, uniform, seq_len)}, tapered
    sched = make_schedule(spec, tapered.n_layers, tapered.schedule["d_ff"])
    return {**head, **_result(sched, tapered, uniform, seq_len)}, tapered


def _from_probe(probe: FromProbeOptions, arch: ScheduleArch, options: ScheduleOptions):
    """The schedule --from-probe derives (checked, not yet written) for --component mlp or heads."""
    from tlm_probe.commands.schedule_from_probe import check_stability, derive_from_probe
    from tlm_probe.commands.schedule_trust import check_trust_stability
    from tlm_probe.results import is_trust_folder

    if arch.preset:
        raise UserError("--from-probe takes its layers from the probe: drop --preset")
    if options.given():  # the probe gives the widths: a shape parameter would be ignored
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in options.given())
        raise UserError(f"--from-probe derives the schedule from the probe; drop {flags}")
    if options.component == "mlp":
        budget, unit = arch.d_ff, options.multiple_of
    else:
        budget = arch.n_heads
        unit = _probe_head_unit(options.component, arch.n_heads, arch.n_kv_heads, probe.min_ratio)
    derived = derive_from_probe(probe, budget, unit)
    if probe.check_with is not None:
        derived = check_stability(derived, probe, budget, unit)
    trust = probe.trust or (probe.from_probe if is_trust_folder(probe.from_probe) else None)
    if trust is not None:  # a trust folder: its corpora and halves (commands/schedule_trust.py)
        derived = check_trust_stability(derived, probe, trust, unit)
    elif probe.check_with is None:
        err_console.print("stability: not checked (a probe folder holds no per-half values): give --trust "
                          "DIR from tlm trust, or --check-with a second probe (tlm probe --half b)",
                          markup=False, highlight=False)
    if arch.n_layers is not None and arch.n_layers != derived.n_layers:
        raise UserError(f"--layers {arch.n_layers} differs from the probe's {derived.n_layers} layers; drop "
                        "--layers (--from-probe takes the probe's)")
    return derived


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


def _check_used(text: str, spec: ScheduleSpec, given: dict) -> None:
    """Refuse what the schedule would ignore: extra spec-string numbers, or flags it does not read."""
    uses = SCHEDULES.get(spec.name).params  # in the order of its spec string (name:p1:p2:...)
    n_given = len(text.split(":")) - 1
    if n_given > len(uses):
        takes = f"{len(uses)} parameter{'s' * (len(uses) != 1)}" + (f" ({':'.join(uses)})" if uses else "")
        raise UserError(f"--schedule {text!r}: {spec.name} takes {takes}, got {n_given}")
    unused = [f"--{k.replace('_', '-')}" for k in given if k not in uses]
    if unused and spec.name not in ("explicit", FILE):
        raise UserError(f"--schedule {spec.name} does not use {', '.join(unused)}; drop it")


def _spec(options: ScheduleOptions) -> ScheduleSpec:
    """The spec of --schedule and the shape flags; a parameter not given takes the shape's default."""
    text, multiple_of = options.schedule, options.multiple_of
    spec = parse_schedule(text, multiple_of)
    given = options.given()
    _check_used(text.strip(), spec, given)
    fixed = ":" in text or spec.name in ("explicit", FILE)  # the spec text holds every number
    if given and fixed:  # two sources for one number: refuse, not pick
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in given)
        raise UserError(f"--schedule {text!r} already sets its parameters; drop {flags}")
    if fixed:
        return spec
    defaults = SCHEDULES.get(spec.name).defaults
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
                  + (f" per level x {cfg.mlp_levels} levels" if cfg.mlp_levels > 1 else ""))
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
    if SCHEDULES.get(r["schedule"]["name"]).group == "grouped":
        console.print(GROUPED_NOTE)


GROUPED_NOTE = ("grouped controls: thirds by (3·l)//L; every control moves the same width "
                "round((wide_factor - 1)·d_ff·L/3) into its third, also when L % 3 != 0 (thirds of "
                "unequal size: per-layer gains then differ between controls, the total does not)")
