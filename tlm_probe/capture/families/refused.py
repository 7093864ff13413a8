"""Model types refused with a reason rather than a row (and never discovered): what the probe's result
contract cannot represent. (T5 has a row per stack, families/encoders.py: its encoder stack as MODEL, its
decoder stack as MODEL:decoder, each its own model in the table, the probe's sequence as source and target.)

Encoder-decoder models have two stacks of layers, each its own depth axis, and a decoder block with a third
sublayer (cross-attention over the encoder's output). The result table (DESIGN.md section 2: model, layer,
depth = l/(L-1), statistic, value, ..., d_ff) has one depth axis per model: two stacks in one table would put
two different layers at each (layer, depth), and what the decoder reads (which target text, shifted how)
is a choice the probe's inputs (one token sequence) do not make. A `stack` column in the contract, and a
decoder input option, would lift this.
"""

from __future__ import annotations

_ENCODER_DECODER = (
    "encoder-decoder model: two stacks (encoder and decoder, each its own depth axis) and a cross-attention "
    "sublayer in each decoder block; the result table has one depth axis per model (model, layer, depth) and "
    "the probe feeds one token sequence, not a source and a target, so neither stack is probed on its own"
)

REFUSED: dict[str, str] = {
    t: _ENCODER_DECODER
    for t in ("mt5", "umt5", "longt5", "switch_transformers", "bart", "mbart", "pegasus", "marian")
}
