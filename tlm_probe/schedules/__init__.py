"""Schedules: every per-layer allocation (widths.py: the paper's shapes, the allocation zoo, explicit and
probe-derived widths, exact budget by largest remainder; heads.py: query/key-value heads and memory widths;
rules.py: a probe statistic -> widths). Pure arithmetic: imports no model code."""
