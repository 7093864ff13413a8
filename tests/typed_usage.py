"""A notebook user's calls, as a type checker reads them (tests/test_public_types.py runs pyright on it):
every line types cleanly but those marked `# expect-error`, which a checker must refuse. Never run: the
paths name nothing."""
# pyright: basic

from pathlib import Path

import numpy as np
import pandas as pd
import torch

import tlm_probe as tp
from tlm_probe.train.config import TrainConfig

h = tp.load("runs/uniform-s0", dtype="float32")
cache = h.run_with_cache("The quick brown fox", names=["mlp_out", "resid_post"], layers=[0, -1])
x: torch.Tensor = cache["mlp_out", 0]
stack: torch.Tensor = cache.stack("resid_post")
loss = cache.loss
ids, mask = h.encode(["a", "b"])
cache2 = h.run_with_cache({"input_ids": ids, "attention_mask": mask}, names="mlp_out", layers=range(2))
cache3 = h.run_with_cache(np.array([[1, 2, 3]]), layers=0, device="cpu", dtype=torch.float64)
edits = {("mlp_out", 0): tp.zero(), ("attn_out", (1, 2)): tp.mean(cache), ("resid_post", 1): "zero"}
with h.hooks(edits) as same:
    ablated = same.run_with_cache("The quick brown fox", names=[])
with h.hooks([(("mlp_out", [0, 1]), lambda t: t * 0.5), (("mlp_out", 2), tp.add([0.0] * 64))]):
    pass


def my_stat(pieces: dict[str, torch.Tensor]) -> torch.Tensor:
    return pieces["mlp_out"].norm(dim=-1)


table: pd.DataFrame = h.stream("builtin:pydoc", my_stat, names=["mlp_out"], max_tokens=2048)
df: pd.DataFrame = tp.probe(h, "builtin:pydoc", stats=["alignment"], max_tokens=2048)
full = tp.probe("runs/uniform-s0", full=True)
prov = full.provenance["model"]
flag = bool(len(prov))
either = tp.probe(h, full=flag)
fig = tp.plot([df, "probes/x"], kind="depth", out=Path("x.png"))
res = tp.diff(h, "runs/cosine-s0", max_tokens=4096)
cka: np.ndarray = res.cka
sched = tp.schedule("cosine:1.5:0.5", arch={"n_layers": 12, "d_ff": 1024})
sched2 = tp.schedule([512, 256, 128], n_layers=3, d_ff=300)
summary = tp.train(TrainConfig(d_model=64, steps=10), out="runs/a")
summary2 = tp.train({"model": {"d_model": 64}}, out="runs/b", steps=10)
cfg = TrainConfig(d_model=64, mixer="titans", window=32)
mc = cfg.model_config(256)
w: int = mc.window
cmp = tp.compare(["uniform", "cosine:1.5:0.5"], [0, 1], out="cmp", steps=30)
opts = tp.ProbeOptions(max_tokens=1024, split="val", dtype="bfloat16")
err = tp.UserError("x")
h.run_with_cache(3.5)  # expect-error: a float is no input
h.run_with_cache("x", layers="0")  # expect-error: a layer is an int
tp.zero(1)  # expect-error: zero() takes nothing
tp.probe(h, full="yes")  # expect-error: full is a bool
w2: str = mc.window  # expect-error: window is an int
bad_cfg = TrainConfig(d_model=64, stepz=10)  # expect-error: a misspelt training option
