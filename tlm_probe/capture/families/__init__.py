"""The adapter table's rows, one module per family group; ADAPTERS keeps the table's order (the docs' family
list is generated in this order). What a row holds: capture/rows.py; lookup and user rows: adapters.py."""

from __future__ import annotations

from tlm_probe.capture.families.encoders import ENCODERS, T5_ENCODER
from tlm_probe.capture.families.gpt import GPT2, GPT_LINEAGE, TLM
from tlm_probe.capture.families.llama import LLAMA_LIKE
from tlm_probe.capture.families.moe import MOE
from tlm_probe.capture.families.recurrent import MAMBA
from tlm_probe.capture.rows import Adapter
from tlm_probe.registry import Registry

ADAPTERS: Registry[Adapter] = Registry("family", {
    row.family: row for row in (TLM, GPT2, *LLAMA_LIKE, *MOE, MAMBA, *GPT_LINEAGE, *ENCODERS, T5_ENCODER)})
