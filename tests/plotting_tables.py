"""Small contract-conforming tables for the plotting and report tests, and image decoders for the checks."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

STATS = ("align_mlp_mid", "block_influence", "mlp_influence")
MODELS = {  # name: per-layer MLP widths
    "uniform-6": (256,) * 6,
    "tapered-4": (384, 320, 192, 128),
}


def result_table(models: dict = MODELS, stats=STATS, n_tokens: int = 4096, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for model, widths in models.items():
        n = len(widths)
        for l, w in enumerate(widths):
            for s in stats:
                v = float(rng.uniform(-0.2, 0.8))
                rows.append(dict(model=model, layer=l, depth=l / (n - 1), statistic=s, value=v,
                                 ci_low=v - 0.05, ci_high=v + 0.07, n_tokens=n_tokens, d_ff=w, std=0.1))
    return pd.DataFrame(rows)


def matrix_table(models: dict = MODELS, stat: str = "cka", seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = [dict(model=m, layer_i=i, layer_j=j, statistic=stat, value=float(rng.uniform()))
            for m, widths in models.items() for i in range(len(widths)) for j in range(len(widths))]
    return pd.DataFrame(rows)


def png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as im:
        im.load()  # decodes every pixel: a truncated file fails here
        return im.size


def svg_size_pt(path: Path) -> tuple[float, float]:
    root = ET.parse(path).getroot()
    return tuple(float(re.sub(r"pt$", "", root.attrib[k])) for k in ("width", "height"))


def pdf_size_pt(path: Path) -> tuple[float, float]:
    data = path.read_bytes()
    assert data.startswith(b"%PDF")
    box = re.search(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", data)
    return float(box[1]), float(box[2])


# --- real result folders: tiny tapered models probed by the real engine (tlm_probe.probe.engine) ---

REAL_MODELS = {  # name: (schedule, layers); mean width 64, so all have the same MLP budget per layer
    "uniform-4": ("uniform", 4),
    "cosine-4": ("cosine:1.5:0.5", 4),
    "cosine-6": ("cosine:1.5:0.5", 6),
}


# small samples keep the importance suite (gradients, CKA, probes) to seconds on tiny models
FAST_IMPORTANCE = {"grad_sequences": 4, "sample_size": 256, "pool_size": 128, "ablations": ("mlp_zero",)}


def real_probe_results(root: Path, stats: str = "alignment", max_tokens: int = 512,
                       models: dict = REAL_MODELS) -> dict[str, Path]:
    """Build, save and probe each REAL_MODELS entry on the bytes of a standard-library text; returns the
    result folders written by tlm_probe.results.write_results (the files `tlm probe --out` writes)."""
    import pydoc_data.topics

    import torch

    from tlm_probe.models.config import config_with_schedule
    from tlm_probe.models.io import save_tlm
    from tlm_probe.models.tlm import TaperedLM
    from tlm_probe.probe.engine import ProbeOptions, run_probe
    from tlm_probe.results import write_probe
    from tlm_probe.schedules.widths import parse_schedule

    text = pydoc_data.topics.topics["assert"].encode()
    ids = root / "ids.npy"
    np.save(ids, np.frombuffer(text, dtype=np.uint8).astype(np.uint32))
    out = {}
    for k, (name, (schedule, layers)) in enumerate(models.items()):
        torch.manual_seed(k)
        cfg = config_with_schedule(parse_schedule(schedule, 16), 64, d_model=32, n_layers=layers, n_heads=2,
                                   vocab_size=256, max_seq_len=64)
        save_tlm(TaperedLM(cfg), root / name)
        opts = ProbeOptions(data=str(ids), stats=stats, seq_len=64, max_tokens=max_tokens, batch_size=8,
                            importance=dict(FAST_IMPORTANCE))
        res = run_probe(root / name, opts)
        out[name] = write_probe(root / f"probe-{name}", res)
    return out
