"""Quantize weight matrices as llama.cpp's Q8_0, Q4_1 and Q4_K_M files hold them, and dequantize them back
(the error a quantized checkpoint carries, on the float weights it came from).

Q8_0, Q4_1 and Q5_0 blocks come from the `gguf` package (gguf.quants: llama.cpp's reference quantizers).
gguf 0.19 can dequantize Q4_K and Q6_K but not make them, so those two are packed here in llama.cpp's exact
block layout (read back by gguf's own dequantizer, which checks the packing) with the plain scale choice:
Q4_K: per sub-block of 32 the scale (max - min)/15 and offset min (clipped to <= 0), both rounded to 6 bits
against the super-block's fp16 d and dmin; Q6_K: per sub-block of 16 the scale absmax/31, rounded to int8
against the super-block's fp16 d. llama.cpp searches for a better scale per sub-block (make_qkx2_quants,
make_qx_quants); ours skips the search, so its error is expected to be no smaller than llama.cpp's.

Q4_K_M is llama.cpp's mix (llama_tensor_get_type): the output matrix Q6_K; attn_v and ffn_down Q6_K in the
layers use_more_bits picks, Q4_K elsewhere; a matrix whose rows do not split into 256-blocks falls back to
Q5_0 (for Q4_K) or Q8_0 (for Q6_K), and one whose rows do not split into 32-blocks stays fp16.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

QK_K = 256
BLOCK = {Q.Q8_0: 32, Q.Q4_1: 32, Q.Q5_0: 32, Q.Q4_K: QK_K, Q.Q6_K: QK_K}
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0, Q.Q8_0: Q.F16, Q.Q4_1: Q.F16, Q.Q5_0: Q.F16}


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def _levels(x: np.ndarray, step: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """round(x / step) clipped to [lo, hi]; 0 where the step is 0 (an all-zero block)."""
    safe = np.where(step > 0, step, 1.0)
    return np.clip(np.where(step > 0, np.rint(x / safe), 0.0), lo, hi)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """(n, 256k) float32 -> Q4_K blocks (uint8, 144 bytes per 256 values)."""
    b = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(b.min(-1), 0.0)
    scale, offset = (b.max(-1) - lo) / 15.0, -lo  # x ≈ scale * q - offset, q in 0..15
    d, dmin = _f16(scale.max(-1) / 63.0), _f16(offset.max(-1) / 63.0)
    df, dmf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = _levels(scale, df, 0, 63).astype(np.uint8)
    mn = _levels(offset, dmf, 0, 63).astype(np.uint8)
    step, off = (df * sc)[..., None], (dmf * mn)[..., None]
    q = _levels(b + off, step, 0, 15).astype(np.uint8)
    packed = np.empty((len(b), 12), np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(len(b), 128)
    return np.concatenate([d[:, None].view(np.uint8), dmin[:, None].view(np.uint8), packed, qs], axis=1)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """(n, 256k) float32 -> Q6_K blocks (uint8, 210 bytes per 256 values)."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    scale = np.abs(b).max(-1) / 31.0  # q in -31..31 of the stored -32..31
    d = _f16(scale.max(-1) / 127.0)
    df = d.astype(np.float32)[:, None]
    sc = _levels(scale, df, -127, 127).astype(np.int8)
    step = (df * sc)[..., None]
    q = _levels(b, step, -32, 31).astype(np.int16) + 32
    q = q.reshape(len(b), 2, 128).astype(np.uint8)  # two halves of 128 values
    lo, hi = q & 0x0F, q >> 4
    ql = (lo[:, :, :64] | (lo[:, :, 64:] << 4)).reshape(len(b), 128)
    hq = hi.reshape(len(b), 2, 4, 32)
    qh = (hq[:, :, 0] | (hq[:, :, 1] << 2) | (hq[:, :, 2] << 4) | (hq[:, :, 3] << 6)).reshape(len(b), 64)
    return np.concatenate([ql, qh, sc.view(np.uint8), d[:, None].view(np.uint8)], axis=1)


OURS = {Q.Q4_K: quantize_q4_k, Q.Q6_K: quantize_q6_k}


def fits(qtype: Q, n_cols: int) -> bool:
    return qtype == Q.F16 or n_cols % BLOCK[qtype] == 0


def settle(qtype: Q, n_cols: int) -> Q:
    """The type llama.cpp actually writes for rows of n_cols: the fallback chain until the rows fit."""
    while not fits(qtype, n_cols):
        qtype = FALLBACK[qtype]
    return qtype


def roundtrip(w: np.ndarray, qtype: Q) -> np.ndarray:
    """w (2-D float32, rows of a multiple of the type's block) quantized to qtype and dequantized back."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if qtype == Q.F16:
        return w.astype(np.float16).astype(np.float32)
    blocks = OURS[qtype](w) if qtype in OURS else quants.quantize(w, qtype)
    return quants.dequantize(blocks, qtype).reshape(w.shape).astype(np.float32)


def use_more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp: the first and last eighth of the layers and every third one between get more bits."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def q4_k_m_type(role: str, layer: int | None, n_layers: int) -> Q:
    """Q4_K_M's type for a matrix of `role` (output | attn_v | ffn_down | other) in `layer`."""
    if role == "output":
        return Q.Q6_K
    if role in ("attn_v", "ffn_down") and layer is not None and use_more_bits(layer, n_layers):
        return Q.Q6_K
    return Q.Q4_K
