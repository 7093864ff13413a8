"""The arms of a comparison: an `Arm(mixer, schedule)`, the grid of them, what each trains (one allocation
spelled two ways is one arm), its run folder's name, each mixer's baseline arm, and the equal budget every
arm of one mixer must share (checked before anything trains). train/compare.py trains them."""

from __future__ import annotations

from dataclasses import dataclass

from tlm_probe.errors import UserError
from tlm_probe.models.accounting import count_params, kv_cache_bytes_per_token, train_flops_per_token
from tlm_probe.models.mixer_registry import REFERENCE_MIXER
from tlm_probe.schedules.heads import COMPONENTS, split_components
from tlm_probe.schedules.widths import FILE, SCHEDULES, parse_schedule
from tlm_probe.seeds import check_seed
from tlm_probe.train.config import TrainConfig

DEFAULT_MIXER = REFERENCE_MIXER
BUDGET = ("params", "flops_per_token", "kv_bytes_per_token")
"""What every arm of one mixer must share exactly."""


def parse_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"--{what} is empty")
    if len(set(items)) != len(items):
        raise UserError(f"--{what} lists an item twice: {text}")
    return items


def parse_seeds(text: str) -> list[int]:
    items = parse_list(text, "seeds")
    if not all(s.lstrip("-").isdigit() for s in items):
        raise UserError(f"--seeds must be integers separated by commas, got {text!r}")
    seeds = [check_seed(int(s), "--seeds: a seed") for s in items]
    if len(set(seeds)) != len(seeds):  # "0,00" or "7,07": one seed twice would train it twice
        raise UserError(f"--seeds lists a seed twice: {text}")
    return seeds


@dataclass(frozen=True)
class Arm:
    """One arm of a comparison: a token mixer and a width schedule (trained with every seed)."""

    mixer: str
    schedule: str

    @property
    def name(self) -> str:
        return self.schedule if self.mixer == DEFAULT_MIXER else f"{self.mixer}-{self.schedule}"

    def config(self, base: TrainConfig, seed: int | None = None) -> TrainConfig:
        """The arm's run: its schedule is the MLP's ('cosine:1.5:0.5'), or names components
        ('heads=cosine:1.5:0.5+kv=...'; schedules.heads.split_components); a component it does not name
        keeps the base's (--heads-schedule / --kv-schedule; the MLP: uniform)."""
        parts = split_components(self.schedule)
        tc = base.replace(mixer=self.mixer, schedule=parts.get("mlp", "uniform"),
                          heads_schedule=parts.get("heads", base.heads_schedule),
                          kv_schedule=parts.get("kv", base.kv_schedule),
                          mem_schedule=parts.get("mem", base.mem_schedule))
        return tc if seed is None else tc.replace(seed=seed)


def make_arms(mixers: list[str], schedules: list[str]) -> list[Arm]:
    """The mixer x schedule grid, mixer-major."""
    return [Arm(m, s) for m in mixers for s in schedules]


def as_arms(base: TrainConfig, arms: list) -> list[Arm]:
    """Arms given as Arm objects, or as schedule strings of the base config's mixer. Two arms that are
    one allocation spelled two ways ('uniform' and 'mlp=uniform', 'cosine' and 'cosine:1.5:0.5') are
    refused: both would train the same model, and their paired difference would be exactly 0."""
    out = [a if isinstance(a, Arm) else Arm(base.mixer, a) for a in arms]
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise UserError(f"an arm is listed twice: {', '.join(names)}")
    seen: dict[tuple, Arm] = {}
    for arm in out:
        key = allocation_key(arm, base)
        if key in seen:
            first = seen[key]
            tapered = [f"{c} {_shown(k)}" for c, k in key[1] if k != ("uniform",)]
            spelled = ", ".join(tapered) + "; the other components uniform" if tapered else "all uniform"
            raise UserError(f"arms {first.schedule!r} and {arm.schedule!r}{_of_mixer(arm)} are the same "
                            f"allocation ({spelled}): they would train one model twice; list it once")
        seen[key] = arm
    return out


def allocation_key(arm: Arm, base: TrainConfig) -> tuple:
    """What an arm trains, whatever its spelling: its mixer and each component's schedule (the MLP's,
    heads', KV heads' and memory's; one it does not name is the base's, and no schedule is uniform), each
    as its shape and the numbers that shape uses (defaults filled in), or its explicit widths."""
    parts = split_components(arm.schedule)
    given = {"mlp": parts.get("mlp", "uniform"), "heads": parts.get("heads", base.heads_schedule),
             "kv": parts.get("kv", base.kv_schedule), "mem": parts.get("mem", base.mem_schedule)}
    return arm.mixer, tuple((c, _spec_key(given[c] or "uniform")) for c in COMPONENTS)


def _spec_key(text: str) -> tuple:
    spec = parse_schedule(text)
    if spec.name in ("explicit", FILE):
        return ("widths", tuple(spec.widths))
    return (spec.name, *(float(getattr(spec, k)) for k in SCHEDULES.get(spec.name).params))


def _shown(key: tuple) -> str:
    name, *nums = key
    if name == "widths":
        return ",".join(map(str, nums[0]))
    return ":".join([name, *(f"{x:g}" for x in nums)])


def _of_mixer(arm: Arm) -> str:
    return "" if arm.mixer == DEFAULT_MIXER else f" of the mixer {arm.mixer}"


def run_name(arm: str, seed: int) -> str:
    """The run's folder name under runs/. A schedule-file arm is a path ('/x/s.json', 'a/b.json'): its
    slashes become '_' so the run stays one folder inside runs/ (an absolute path joined to runs/ would
    otherwise point outside the comparison)."""
    return f"{arm.replace('/', '_').replace(chr(92), '_')}-s{seed}"


def baselines(arms: list[Arm]) -> dict[str, str]:
    """Mixer -> the name of its baseline arm: its uniform schedule if listed, else its first arm."""
    out: dict[str, str] = {}
    for a in arms:
        out.setdefault(a.mixer, a.name)
        if a.schedule == "uniform":
            out[a.mixer] = a.name
    return out


def check_budget(base: TrainConfig, arms: list, vocab_size: int) -> dict[str, dict]:
    """Parameters and FLOPs per token of each arm; a UserError unless equal across each mixer's arms."""
    arms = as_arms(base, arms)
    budget, first = {}, {}
    for arm in arms:
        cfg = arm.config(base).model_config(vocab_size)
        b = budget[arm.name] = {
            "params": count_params(cfg).total,
            "flops_per_token": train_flops_per_token(cfg, base.seq_len),
            "kv_bytes_per_token": kv_cache_bytes_per_token(cfg),
            "d_ff": list(cfg.d_ff),
            "heads": [cfg.heads_at(l) for l in range(cfg.n_layers)],
            "kv_heads": [cfg.kv_heads_at(l) for l in range(cfg.n_layers)],
        }
        ref_name = first.setdefault(arm.mixer, arm.name)
        ref = budget[ref_name]
        if any(b[k] != ref[k] for k in BUDGET):
            raise UserError(
                f"arm {arm.name!r} has {b['params']:,} params / {b['flops_per_token']:,} FLOPs / "
                f"{b['kv_bytes_per_token']:,} KV-cache bytes per token, {ref_name!r} has {ref['params']:,} / "
                f"{ref['flops_per_token']:,} / {ref['kv_bytes_per_token']:,}: not a fair comparison"
            )
    return budget
