"""The capture backends by name: each entry imports its class on use (transformer_lens and nnsight take
seconds to import, and a probe needs only one)."""

from __future__ import annotations


def _native():
    from tlm_probe.capture.native import NativeBackend

    return NativeBackend


def _transformer_lens():
    from tlm_probe.capture.tl_backend import TransformerLensBackend

    return TransformerLensBackend


def _nnsight():
    from tlm_probe.capture.nnsight_backend import NNsightBackend

    return NNsightBackend


BACKENDS = {"native": _native, "transformer-lens": _transformer_lens, "nnsight": _nnsight}
