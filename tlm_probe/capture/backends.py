"""The capture backends by name: each entry imports its class on use (transformer_lens and nnsight take
seconds to import, and a probe needs only one)."""

from __future__ import annotations

from tlm_probe.registry import Registry

BACKENDS: Registry[type] = Registry("backend", {
    "native": "tlm_probe.capture.native:NativeBackend",
    "transformer-lens": "tlm_probe.capture.tl_backend:TransformerLensBackend",
    "nnsight": "tlm_probe.capture.nnsight_backend:NNsightBackend",
}, lazy=True)
