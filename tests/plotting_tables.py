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
