"""`tlm schedule`: per-layer MLP widths of a schedule, with parameter and FLOP parity against uniform."""

from __future__ import annotations

import typer
from rich.table import Table

from tlm_probe.accounting import comparison, count_params
from tlm_probe.commands.common import command, console, print_json
from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.schedules import ScheduleSpec, make_schedule, parse_schedule


def register(app: typer.Typer) -> None:
    @command(app, "schedule", "tlm schedule --layers 24 --d-ff 4096 --schedule cosine --start 1.5 --end 0.5")
    def schedule(
        layers: int = typer.Option(24, help="Number of layers L."),
        d_ff: int = typer.Option(4096, "--d-ff", help="Uniform MLP width; the budget is L·d_ff."),
        schedule: str = typer.Option("cosine", help="uniform|linear|cosine|sigmoid|wider-early|"
                                     "wider-middle|wider-late, or explicit widths '4096,4096,...'."),
        start: float = typer.Option(None, help="Start ratio r_s (tapers; default 1.5)."),
        end: float = typer.Option(None, help="End ratio r_e (tapers; default 0.5)."),
        steepness: float = typer.Option(None, help="Sigmoid steepness (default 10)."),
        wide_factor: float = typer.Option(None, help="Width ratio of the wide third (grouped; default 1.5)."),
        multiple_of: int = typer.Option(64, help="Round every width to a multiple of this."),
        d_model: int = typer.Option(1024, help="Residual width, for the parameter accounting."),
        vocab_size: int = typer.Option(32000, help="Vocabulary size, for the parameter accounting."),
        mlp: str = typer.Option("swiglu", help="swiglu | gelu (3·d·d_l or 2·d·d_l MLP weights)."),
        seq_len: int = typer.Option(4096, help="Context length for the attention FLOP term."),
        json_out: bool = typer.Option(False, "--json", help="Print a JSON object instead of a table."),
    ):
        """Print the per-layer MLP widths of a schedule and its parameter/FLOP parity with uniform."""
        spec = _spec(schedule, start, end, steepness, wide_factor, multiple_of)
        sched = make_schedule(spec, layers, d_ff)
        base = dict(vocab_size=vocab_size, d_model=d_model, n_layers=layers,
                    n_heads=max(1, d_model // 64), mlp=mlp, max_seq_len=seq_len)
        tapered = TLMConfig(d_ff=sched.widths, **base)
        uniform = TLMConfig(d_ff=(d_ff,) * layers, **base)
        result = _result(sched, tapered, uniform, seq_len)
        if json_out:
            print_json(result)
        else:
            _print_table(result, tapered)


FLAG_DEFAULTS = {"start": 1.5, "end": 0.5, "steepness": 10.0, "wide_factor": 1.5}


def _spec(text, start, end, steepness, wide_factor, multiple_of) -> ScheduleSpec:
    spec = parse_schedule(text, multiple_of)
    given = {k: v for k, v in dict(start=start, end=end, steepness=steepness, wide_factor=wide_factor).items()
             if v is not None}
    if given and (":" in text or spec.name == "explicit"):  # two sources for one number: refuse, not pick
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in given)
        raise UserError(f"--schedule {text!r} already sets its parameters; drop {flags}")
    if ":" in text or spec.name == "explicit":
        return spec
    return ScheduleSpec(name=spec.name, multiple_of=multiple_of, **{**FLAG_DEFAULTS, **given})


def _result(sched, tapered: TLMConfig, uniform: TLMConfig, seq_len: int) -> dict:
    pc = count_params(tapered)
    return {
        "schedule": sched.spec.to_dict(),
        "layers": sched.n_layers,
        "d_ff": sched.d_ff,
        "widths": list(sched.widths),
        "ratios": [w / sched.d_ff for w in sched.widths],
        "effective_start": sched.effective_start,
        "effective_end": sched.effective_end,
        "total": sched.total,
        "uniform_total": sched.uniform_total,
        "layer_params": [l.total for l in pc.layers],
        "mlp_params": pc.mlp,
        **comparison(tapered, uniform, seq_len),
    }


def _print_table(r: dict, cfg: TLMConfig) -> None:
    table = Table(title=f"{r['schedule']['name']} schedule, L={r['layers']}, d_ff={r['d_ff']}")
    for col in ("layer", "depth", "width", "ratio", "block params"):
        table.add_column(col, justify="right")
    L = r["layers"]
    for l, (w, ratio, p) in enumerate(zip(r["widths"], r["ratios"], r["layer_params"], strict=True)):
        table.add_row(str(l), f"{l / max(L - 1, 1):.3f}", str(w), f"{ratio:.3f}", f"{p:,}")
    console.print(table)
    console.print(f"widths total {r['total']:,} (uniform {r['uniform_total']:,}); effective ratios "
                  f"{r['effective_start']:.3f} -> {r['effective_end']:.3f}")
    console.print(f"params {r['params']:,} vs uniform {r['uniform_params']:,}; train FLOPs/token "
                  f"{r['flops_per_token']:,} vs {r['uniform_flops_per_token']:,}; "
                  f"parity: {'yes' if r['parity'] else 'NO'}")
