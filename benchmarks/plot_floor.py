"""The floor of `tlm plot`: what any command that reads a probe table and saves one figure must pay.
It imports pandas, seaborn, matplotlib, typer and rich (the libraries `tlm plot` draws and talks with),
reads results.csv and saves one line of one statistic. `python benchmarks/plot_floor.py PROBE_DIR OUT.png`"""

import sys

import matplotlib
import pandas as pd
import rich  # noqa: F401  (the floor pays its import, as `tlm plot` does)
import seaborn as sns
import typer  # noqa: F401
from matplotlib.figure import Figure

matplotlib.use("Agg")
table = pd.read_csv(f"{sys.argv[1]}/results.csv")
rows = table[table["statistic"] == "align_mlp_mid"]
sns.set_theme(style="whitegrid")
fig = Figure(figsize=(8, 16 / 3), dpi=150, layout="constrained")
ax = fig.add_subplot()
sns.lineplot(data=rows, x="depth", y="value", hue="model", marker="o", ax=ax)
ax.fill_between(rows["depth"], rows["ci_low"], rows["ci_high"], alpha=0.2)
fig.savefig(sys.argv[2])
