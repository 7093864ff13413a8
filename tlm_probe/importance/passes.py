"""Counting the importance pass's work: forwards and backwards, in units of one clean forward over the
same batches (rows forwarded / rows of the data), so the cost of each statistic can be read off. The logit
lens unembeds every layer's stream: L x the head's share of a forward, counted with the clean pass."""

from __future__ import annotations


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


def head_share(pm) -> float:
    """The unembedding's share of one forward's matmul work, estimated from parameter counts (a token
    multiplies by every 2-D weight once, except the input embedding, which is a lookup)."""
    head = pm.lm_head()
    if head is None:
        return 0.0
    weights = sum(p.numel() for p in pm.model.parameters() if p.dim() >= 2)
    embed = pm.model.get_input_embeddings() if hasattr(pm.model, "get_input_embeddings") else None
    lookup = embed.weight.numel() if embed is not None and embed.weight is not head.weight else 0
    return head.weight.numel() / max(weights - lookup, 1)


def lens_forwards(pm, decoded_rows: float, rows: int) -> float:
    """The logit lens's unembeddings in forwards of `rows` rows: every layer's stream through the head, on
    the decoded share of the rows (LogitLens.decoded_rows)."""
    return pm.n_layers * head_share(pm) * decoded_rows / max(rows, 1)
