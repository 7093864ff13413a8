"""Counting the importance pass's work: forwards and backwards, in units of one clean forward over the
same batches (rows forwarded / rows of the data), so the cost of each statistic can be read off. The logit
lens is counted by its FLOPs against a forward's (issue 34; a parameter share overcounted it 3x on a
64-wide model): per decoded position, each of the L layers' unembeddings, 2·d·V, and its LENS_V_FLOPS
vocabulary-wide passes, plus FINAL_V_FLOPS once for the model's own prediction; a forward is 2 FLOPs per
matmul weight and token plus attention's 4·d·T per layer and token (scores and weighted sum over T keys).
"""

from __future__ import annotations

from torch import nn

LENS_V_FLOPS = 8
"""FLOPs per logit per layer of the lens's vocabulary-wide passes (logit_lens.LogitLens._chunk): max,
subtract, exp, sum, then q·z and e·z, each a multiply and a sum."""
FINAL_V_FLOPS = 9
"""FLOPs per logit of the final prediction, once per decoded position (logit_lens._Final): log-softmax
(max, subtract, exp, sum, subtract), exp, q·log q (multiply, sum) and argmax."""


class PassCounter:
    def __init__(self, rows: int):
        self.rows = max(rows, 1)
        self.calls: dict[str, dict[str, float]] = {}

    def _add(self, part: str, what: str, rows: float) -> None:
        entry = self.calls.setdefault(part, {"forward_calls": 0, "forward_rows": 0, "backward_rows": 0})
        entry[what] += rows
        if what == "forward_rows":
            entry["forward_calls"] += 1

    def forward(self, part: str, rows: int, share: float = 1.0) -> None:
        """rows forwarded; share < 1 where a call runs only part of the model (a restarted ablation)."""
        self._add(part, "forward_rows", rows * share)

    def extra(self, part: str, forwards: float) -> None:
        """Work that is not a model forward, in forward-equivalents (e.g. the logit lens's unembeddings)."""
        self.calls.setdefault(part, {"forward_calls": 0, "forward_rows": 0, "backward_rows": 0})
        self.calls[part]["extra"] = self.calls[part].get("extra", 0.0) + forwards * self.rows

    def backward(self, part: str, rows: int) -> None:
        self._add(part, "backward_rows", rows)

    def summary(self) -> dict:
        """part -> forward calls, forwards and backwards as multiples of one clean forward of the data."""
        out = {}
        for part, c in self.calls.items():
            out[part] = {
                "forward_calls": c["forward_calls"],
                "forwards": round((c["forward_rows"] + c.get("extra", 0.0)) / self.rows, 4),
                "backwards": round(c["backward_rows"] / self.rows, 4),
            }
        return out


def matmul_weights(pm) -> int:
    """The weights a token multiplies by once per forward: every 2-D weight but the embedding lookups
    (token, position, type), the LM head included (also when it shares the token embedding's weight)."""
    head = pm.lm_head()
    lookups = {id(m.weight) for m in pm.model.modules() if isinstance(m, nn.Embedding)}
    total = sum(p.numel() for p in pm.model.parameters() if p.dim() >= 2 and id(p) not in lookups)
    return total + (head.weight.numel() if head is not None and id(head.weight) in lookups else 0)


def head_share(pm) -> float:
    """The unembedding's share of one forward's matmul work (matmul_weights)."""
    head = pm.lm_head()
    return 0.0 if head is None else head.weight.numel() / max(matmul_weights(pm), 1)


def forward_flops(pm, seq_len: int) -> float:
    """FLOPs of a forward per token of a seq_len row: 2 per matmul weight, and attention's scores and
    weighted sum, 2·d·T each per layer (the full T x T product; a causal kernel may skip half)."""
    return 2.0 * matmul_weights(pm) + 4.0 * pm.n_layers * pm.d_model * seq_len


def lens_flops(pm) -> float:
    """The logit lens's FLOPs per decoded position: every layer's unembedding (2·d·V) and vocabulary-wide
    passes, and the final prediction's passes (the final norm's O(d) left out)."""
    V, dV = pm.lm_head().weight.shape[0], pm.lm_head().weight.numel()
    return pm.n_layers * (2.0 * dV + LENS_V_FLOPS * V) + FINAL_V_FLOPS * V


def lens_forwards(pm, decoded_rows: float, rows: int, seq_len: int) -> float:
    """The logit lens in forwards of `rows` rows of length seq_len, by FLOPs: its work on the decoded share
    of the rows (LogitLens.decoded_rows) over a forward's."""
    return lens_flops(pm) / forward_flops(pm, seq_len) * decoded_rows / max(rows, 1)
