"""Benchmark the importance pass: measured wall time against (pass count x one clean forward).

The pass count is what provenance records (importance.passes: forwards and backwards as multiples of one
clean forward of the kept batches); a backward counts as two forwards. The ratio measured / count says
how much the pass costs beyond the forwards and backwards its statistics intrinsically need.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_importance.py            # 5-layer Llama, 8x256 batches
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_importance.py --quick    # a smoke run
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_importance.py --restart --d-model 64 --vocab 1000

--interleaved: measured / counted as the median of interleaved rotated rounds (probe with the statistics,
the same probe without its importance pass, one plain forward), for a machine shared with other jobs.
--option KEY=VALUE: an importance option for every arm (e.g. lens_positions=64).
--restart: the ablation pass restarted from the cached clean stream (importance/restart.py) against the
full re-run of every ablation, interleaved rotated rounds on the same model; prints full / restarted.
--floor KINDS: the ablation pass against a restart from the cached clean stream (the peer: from the clean
layer outputs, cached untimed, the clean readout (final norm, head, clean NLL) and the restarted ablated
forwards with their ΔNLL): run_importance alone, and in a probe with a streamed statistic (fused with its
stream, and not); also against the restarted forwards alone (the clean NLL cached too, which no restart
from the stream has: the hidden states do not hold it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import malloc
from benchmarks.timing import line

BACKWARD_IN_FORWARDS = 2.0  # a backward costs about two forwards (one per weight and input gradient)


def llama_folder(folder: Path, layers: int, d_model: int, vocab: int) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=d_model, intermediate_size=d_model * 8 // 3 // 16 * 16,
        num_hidden_layers=layers, num_attention_heads=max(1, d_model // 64), max_position_embeddings=1024,
    )  # fmt: skip
    LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    return folder


def one_forward(pm, batches, repeats: int) -> float:
    """Median seconds of one clean forward (full model, LM head included) over all the batches."""
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 1):
            t = time.perf_counter()
            for ids, mask in batches:
                pm.forward(ids, mask)
            times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


def importance_seconds(pm, ids_file, stats: str, args) -> tuple[float, dict]:
    """Wall time of the importance pass alone: a probe of `stats` minus the stream it rides on."""
    from tlm_probe.api.library import probe

    kw = dict(seq_len=args.seq_len, batch_size=args.batch, max_tokens=None, full=True,
              importance={"grad_sequences": args.grad_sequences})  # fmt: skip
    t = time.perf_counter()
    res = probe(pm, ids_file, stats=stats, **kw)
    total = time.perf_counter() - t
    t = time.perf_counter()
    probe(pm, ids_file, stats="stable_rank_mlp_out", **kw)  # the same stream, no pass
    return total - (time.perf_counter() - t), res.provenance["importance"]["passes"]


def interleaved_ratio(pm, ids_file, stats: str, batches, args) -> dict:
    """measured / counted per round, arms interleaved and rotated (benchmarks/timing.py): the probe with
    `stats`, the same probe without its importance pass, and one plain forward over the same batches."""
    from benchmarks.timing import interleaved, per_round
    from tlm_probe.api.library import probe

    kw = dict(seq_len=args.seq_len, batch_size=args.batch, max_tokens=None, full=True,
              importance={"grad_sequences": args.grad_sequences, **_pairs(args.option)})  # fmt: skip
    passes, lens = {}, {}

    def with_stats():
        prov = probe(pm, ids_file, stats=stats, **kw).provenance["importance"]
        passes.update(prov["passes"])
        lens.update(prov.get("logit_lens", {}))

    def forward():
        with torch.inference_mode():
            for ids, mask in batches:
                pm.forward(ids, mask)

    t = interleaved({"stats": with_stats, "stream": lambda: probe(pm, ids_file, stats="stable_rank_mlp_out",
                                                                   **kw), "forward": forward}, args.rounds)
    c = count(passes)
    r = per_round(t, lambda s: (s["stats"] - s["stream"]) / (c * s["forward"]))
    return {"ratio": r, "pass_count": round(c, 3), "passes": passes, "logit_lens": lens}


def _pairs(options: list[str]) -> dict:
    from tlm_probe.importance.options import parse_pairs

    return parse_pairs(options or [])


def count(passes: dict) -> float:
    return sum(p["forwards"] + BACKWARD_IN_FORWARDS * p["backwards"] for p in passes.values())


def _full_rerun(layers, head):
    """What importance.suite builds as its Restart, with restarting off: every ablation re-runs in full."""
    from tlm_probe.importance.restart import Restart

    r = Restart(layers, head)
    r.refuse("full re-run (benchmark arm)")
    return r


def restart_speedup(pm, args) -> dict:
    """full re-run seconds / restarted seconds of the ablation pass, per round (median, min, max)."""
    from benchmarks.timing import interleaved, ratio
    from tlm_probe.importance import suite
    from tlm_probe.importance.restart import Restart
    from tlm_probe.statistic_names import DEFAULT_ABLATIONS

    g = torch.Generator().manual_seed(0)
    batches = [
        {"input_ids": torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=g),
         "attention_mask": torch.ones(args.batch, args.seq_len, dtype=torch.long)}
        for _ in range(args.batches)
    ]  # fmt: skip
    stats = [f"ablation_dnll_{a}" for a in DEFAULT_ABLATIONS]
    passes = {}

    def arm(cls, name):
        def run():
            saved, suite.Restart = suite.Restart, cls
            try:
                passes[name] = suite.run_importance(pm, batches, stats)[2]["passes"]["ablation"]["forwards"]
            finally:
                suite.Restart = saved

        return run

    times = interleaved({"restart": arm(Restart, "restart"), "full": arm(_full_rerun, "full")}, args.rounds)
    return {"full_over_restart": ratio(times, "full", "restart"), "counted_forwards": passes}


def _random_batches(args) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [
        {"input_ids": torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=g),
         "attention_mask": torch.ones(args.batch, args.seq_len, dtype=torch.long),
         "seq_index": torch.arange(i * args.batch, (i + 1) * args.batch)}
        for i in range(args.batches)
    ]  # fmt: skip


def _floor(pm, batches: list[dict], stats: list[str]):
    """The floor of the ablation pass: its restarted ablated forwards and their ΔNLL alone, each batch's
    clean layer outputs and clean NLL cached beforehand (untimed). Returns (timed arm, its effects, the
    cache)."""
    from tlm_probe.importance import suite
    from tlm_probe.importance.passes import PassCounter

    opts, _ = suite.asked_options(stats, None)
    counter = PassCounter(sum(len(b["input_ids"]) for b in batches))
    eff = suite.ablation_effects(pm, opts, suite.counted_forward(pm, counter, "ablation"), None)
    restart, cached = eff.restart, []
    with torch.no_grad():
        for b in batches:
            with restart.recording():
                clean = eff._run(b, 1.0)
            restart.self_check(eff._run, b)
            cached.append((restart.outputs, restart.templates, eff.reference(clean, b)))
    assert restart.usable(), restart.reason

    @torch.no_grad()
    def run():
        for b, (outputs, templates, ref) in zip(batches, cached, strict=True):
            restart.outputs, restart.templates = outputs, templates
            mask = suite.token_mask(b, opts.exclude_bos)
            B, T = mask.shape
            for group in eff._schedule(B):
                out = eff._ablated(b, group, B, T, restart)
                for k, ab in enumerate(group):
                    vals, m = eff.metric(ref, out[k * B : (k + 1) * B], b, mask)
                    eff.means[f"ablation_{eff.metric_name}_{ab.name}"].add(ab.layer, vals, m)

    return run, eff, cached


def _readout(pm, eff, batches: list[dict], cached: list):
    """The clean readout the ablations' reference needs where the stream stops before the head: the final
    norm, the head and the clean NLL of each batch, from its cached last layer output."""
    norm, head = pm.final_norm() or torch.nn.Identity(), pm.lm_head()

    @torch.no_grad()
    def run():
        for b, (outputs, _, _) in zip(batches, cached, strict=True):
            eff.reference(head(norm(outputs[-1])), b)

    return run


def _probe_arms(pm, folder: Path, batches: list[dict], stats: list[str], args):
    """probe() of a streamed statistic with the ablations (fused with its stream: stream_ablations.py, and
    the same with the fusion off: the importance pass's own clean forward), and of the statistic alone."""
    from tlm_probe.api.library import probe
    from tlm_probe.probe import engine

    np.save(folder / "ids.npy", torch.cat([b["input_ids"] for b in batches]).numpy().astype(np.uint32))
    kw = dict(seq_len=args.seq_len, batch_size=args.batch, max_tokens=None, full=True)
    got = {}

    def with_ablations(fuse: bool):
        def run():
            saved = engine.fused_ablations
            engine.fused_ablations = saved if fuse else (lambda *a: None)
            try:
                res = probe(pm, str(folder / "ids.npy"), stats=",".join([STREAMED, *stats]), **kw)
            finally:
                engine.fused_ablations = saved
            df = res.table[res.table.statistic.str.startswith("ablation_")]
            got["fused" if fuse else "unfused"] = {
                "rows": {(s, int(l)): v for s, l, v in zip(df.statistic, df.layer, df.value, strict=True)},
                "passes": res.provenance["importance"]["passes"]}

        return run

    stream = lambda: probe(pm, str(folder / "ids.npy"), stats=STREAMED, **kw)  # noqa: E731
    return {"fused": with_ablations(True), "unfused": with_ablations(False), "stream": stream}, got


STREAMED = "resid_norm_growth"
"""The probe's streamed statistic in the fused arms (a cheap one: its stream is subtracted)."""


def ablation_floor(pm, args, folder: Path) -> dict:
    """The ablation pass against a restart from the cached clean stream, per round. The restart (the peer)
    starts from the clean layer outputs, cached untimed, and runs what these ΔNLL need from there: the
    clean readout (final norm, head, clean NLL from the last layer output: _readout) and the restarted
    ablated forwards with their ΔNLL (_floor). Against it:
    - in the probe: probe(streamed statistic + ablations) - probe(streamed statistic), the ablations fused
      with the probe's stream (no clean forward of their own), and the same with the fusion off;
    - pass: run_importance of the ablations alone (its own clean forward, the self-check, the restarts);
    - the fused probe against the restarted forwards alone (_floor: the clean NLL cached too), and the
      readout's share of them.
    And the largest ΔNLL difference between each and the floor (the floor's sums run over every round:
    its means are the same numbers)."""
    from benchmarks.timing import interleaved, per_round, ratio
    from tlm_probe.importance import suite

    batches = _random_batches(args)
    stats = [f"ablation_dnll_{a}" for a in args.floor.split(",")]
    floor, eff, cached = _floor(pm, batches, stats)
    arms, got = _probe_arms(pm, folder, batches, stats, args)

    def full():
        rows, _, info = suite.run_importance(pm, batches, stats)
        got["pass"] = {"rows": {(r["statistic"], r["layer"]): r["value"] for r in rows},
                       "passes": info["passes"], "restart": info["ablation_restart"]}

    readout = _readout(pm, eff, batches, cached)

    def restart():  # the peer: what a restart from the cached clean stream runs to give these ΔNLL
        readout()
        floor()

    arms = {"pass": full, **arms, "restart": restart, "floor": floor, "readout": readout}
    times = interleaved(arms, args.rounds)
    mine = {(name, l): r["value"] for name, rs in eff.rows().items() for l, r in enumerate(rs)}
    diff = {arm: max(abs(v - got[arm]["rows"][k]) for k, v in mine.items()) for arm in ("pass", "fused",
                                                                                           "unfused")}
    in_probe = lambda arm, den: per_round(times, lambda s: (s[arm] - s["stream"]) / s[den])  # noqa: E731
    return {"probe_fused_over_restart": in_probe("fused", "restart"),
            "probe_unfused_over_restart": in_probe("unfused", "restart"),
            "pass_over_restart": ratio(times, "pass", "restart"),
            "probe_fused_over_floor": in_probe("fused", "floor"),
            "readout_over_floor": ratio(times, "readout", "floor"),
            "restart_over_floor_and_readout": per_round(
                times, lambda s: s["restart"] / (s["floor"] + s["readout"])),
            "max_abs_dnll_difference": diff, "passes": {a: got[a]["passes"] for a in ("pass", "fused")},
            "restart": got["pass"]["restart"], "streamed_statistic": STREAMED}  # fmt: skip


FLOOR_LINES = {
    "probe_fused_over_restart": "in the probe, fused with its stream / restart",
    "probe_unfused_over_restart": "in the probe, fusion off / restart",
    "pass_over_restart": "run_importance (own clean forward) / restart",
    "probe_fused_over_floor": "in the probe, fused / restarted forwards alone",
    "readout_over_floor": "clean readout (norm, head, NLL) / restarted forwards",
    "restart_over_floor_and_readout": "restart / (its two parts timed apart)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--grad-sequences", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--stats", default="importance,logit_lens_kl,ablation_dnll_mlp_zero,taylor_mlp,fisher_mlp"
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--restart", action="store_true", help="only the restart vs full re-run ablation arm")
    ap.add_argument("--floor", default="", help="only the ablation pass against a restart from the cached "
                    "clean stream (and against its restarted forwards alone) for these kinds, e.g. mlp_zero")
    ap.add_argument("--rounds", type=int, default=7,
                    help="interleaved rounds (--interleaved, --restart, --floor)")
    ap.add_argument("--option", action="append", help="importance option KEY=VALUE (e.g. lens_positions=64)")
    ap.add_argument("--interleaved", action="store_true",
                    help="measured / counted as the median of interleaved rotated rounds (a shared machine)")
    malloc.add_option(ap)
    args = ap.parse_args()
    malloc.apply(args)
    if args.quick:
        args.layers, args.d_model, args.vocab, args.seq_len, args.batches = 2, 64, 1000, 64, 1
        args.grad_sequences = 4
    torch.set_num_threads(args.threads)
    from tlm_probe.capture import load_probe_model

    with tempfile.TemporaryDirectory() as tmp:
        pm = load_probe_model(llama_folder(Path(tmp) / "llama", args.layers, args.d_model, args.vocab))
        if args.floor:
            res = ablation_floor(pm, args, Path(tmp))
            print(f"ablations {args.floor}, llama {args.layers}x{args.d_model} V {args.vocab} (restart: from "
                  "the cached clean stream, its clean readout and the restarted ablated forwards):")
            for key, name in FLOOR_LINES.items():
                print(line(name, res[key]))
            diff = ", ".join(f"{k} {v:.2e}" for k, v in res["max_abs_dnll_difference"].items())
            print(f"  max |ΔNLL - floor's|: {diff}; restart: {res['restart']}")
            print(json.dumps(res))
            return
        if args.restart:
            res = restart_speedup(pm, args)
            c = res["counted_forwards"]
            print(line(f"ablations, llama {args.layers}x{args.d_model} V {args.vocab}: full / restarted",
                       res["full_over_restart"]))
            fewer = c["full"] / c["restart"]
            print(f"  counted forwards {c['full']:.2f} -> {c['restart']:.2f} ({fewer:.3f}x)")
            print(json.dumps(res))
            return
        n = args.batch * args.seq_len * args.batches
        ids = np.random.default_rng(0).integers(0, args.vocab, (args.batch * args.batches, args.seq_len))
        np.save(Path(tmp) / "ids.npy", ids.astype(np.uint32))
        ones = torch.ones(args.batch, args.seq_len, dtype=torch.long)
        batches = [(torch.from_numpy(ids[i : i + args.batch]), ones) for i in range(0, len(ids), args.batch)]
        fwd = one_forward(pm, batches, repeats=3)
        report = {"model": f"llama {args.layers}x{args.d_model}, vocab {args.vocab}", "tokens": n,
                  "one_forward_s": round(fwd, 4), "stats": {}}  # fmt: skip
        for stats in args.stats.split(",") if args.interleaved else ():
            res = interleaved_ratio(pm, str(Path(tmp) / "ids.npy"), stats, batches, args)
            report["stats"][stats] = res
            print(line(f"{stats} measured / counted ({res['pass_count']:.2f} passes)", res["ratio"]))
        for stats in args.stats.split(",") if not args.interleaved else ():
            seconds, passes = importance_seconds(pm, str(Path(tmp) / "ids.npy"), stats, args)
            c = count(passes)
            report["stats"][stats] = {"measured_s": round(seconds, 3), "pass_count": round(c, 3),
                                      "ratio": round(seconds / (c * fwd), 3), "passes": passes}  # fmt: skip
            print(
                f"{stats:28s} measured {seconds:7.2f} s   passes {c:6.2f} x forward {fwd:.3f} s = "
                f"{c * fwd:7.2f} s   ratio {seconds / (c * fwd):.2f} "
                "(one shot, wall clock: not a measurement; --interleaved is)"
            )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
