"""How torch's idle CPU threads wait between parallel regions: OpenMP's default (spin, then sleep) against
OMP_WAIT_POLICY=PASSIVE (sleep at once), which the `tlm` command sets unless the user set it
(tlm_probe/threads.py: passive_omp_wait).

Arms: the same `tlm` command as a fresh process, with the variable unset and with PASSIVE, at torch's
default thread count (every core). Interleaved and rotated (benchmarks/timing.py); the figure is the median
over rounds of the per-round ratio PASSIVE / default, by wall clock and by process CPU time (the child's).
Run it on an idle machine and on one busy with other jobs: spinning threads cost little on idle cores and
much where another process needs the core.

`python -m benchmarks.bench_omp_wait [--rounds 7] [--steps 10] [--tokens 1024] [--only train demo]
[--out FILE.json]`
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_start import run_env
from benchmarks.models import smollm2
from benchmarks.timing import interleaved, line, ratio, rounds_note, spread

ROOT = Path(__file__).resolve().parents[1]


def commands(steps: int, tokens: int) -> dict[str, list[str]]:
    """name -> `tlm` arguments: a small model's training (many small kernels), a 30-layer model's probe
    (mostly the GGUF's dequantisation, one thread) and the demo a new user runs first."""
    out = {f"train tlm-tiny, {steps} steps": ["train", "--preset", "tlm-tiny", "--steps", str(steps),
                                              "--out", "FOLDER"]}
    gguf = smollm2()
    if gguf is not None:
        probe = ["probe", str(gguf), "--data", "builtin:pydoc", "--max-tokens", str(tokens)]
        out[f"probe SmolLM2-135M, {tokens:,} tokens"] = [*probe, "--out", "FOLDER"]
    out["demo --quick"] = ["demo", "--quick", "--out", "FOLDER"]
    return out


def _run(args: list[str], passive: bool) -> None:
    """One fresh `tlm` process writing into a new folder (a demo run again into its folder would continue,
    not redo, its training)."""
    env = run_env(ROOT)  # offline, bytecode cached, as bench_start's arms run
    env.pop("OMP_WAIT_POLICY", None)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        env["TLM_PROBE_OMP_WAIT"] = "default"  # the command leaves OpenMP's default
    out = args.index("--out") + 1
    with tempfile.TemporaryDirectory(prefix="tlm-bench-omp-") as tmp:
        args = [*args[:out], str(Path(tmp) / "out"), *args[out + 1:]]
        r = subprocess.run([sys.executable, "cli.py", *args], cwd=ROOT, env=env, capture_output=True,
                           text=True)
    if r.returncode:
        raise SystemExit(f"tlm {' '.join(args)} failed:\n{r.stderr[-2000:]}")


def measure(rounds: int, steps: int, tokens: int, only: list[str], out: Path | None) -> dict:
    """Each command's figures, written into `out` as each command finishes (a long run keeps what it has;
    the entries of commands not run this time are kept, so that `--only` adds to a report)."""
    report = json.loads(out.read_text())["commands"] if out and out.exists() else {}
    for name, args in commands(steps, tokens).items():
        if only and not any(word in name for word in only):
            continue
        fns = {"default": lambda a=args: _run(a, False), "passive": lambda a=args: _run(a, True)}
        times = interleaved(fns, rounds)
        report[name] = {"passive / default": ratio(times, "passive", "default"),
                        "default_s": spread(times["default"]), "passive_s": spread(times["passive"]),
                        "rounds": rounds_note(rounds), "load_after": os.getloadavg()}
        print(line(name, report[name]["passive / default"]), flush=True)
        if out:
            out.write_text(json.dumps({"cores": os.cpu_count(), "commands": report}, indent=2) + "\n")
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10, help="training steps of the train command")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens the probe command reads")
    ap.add_argument("--only", nargs="*", default=[], help="run only the commands named (train, probe, demo)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    print(f"PASSIVE / OpenMP's default, {os.cpu_count()} cores, fresh processes:", flush=True)
    measure(args.rounds, args.steps, args.tokens, args.only, args.out)


if __name__ == "__main__":
    main()
