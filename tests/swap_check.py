"""One check shared by the chunked-vs-reference tests of the mixers: the model's loss and every parameter's
gradient are the same whichever of two implementations a module attribute names."""

from __future__ import annotations

import torch


def same_loss_and_grads(model, x, monkeypatch, module, attr: str, fns) -> dict[str, torch.Tensor]:
    """Run loss + backward with module.attr = each of fns (two); assert loss within 1e-6 and gradients
    within 1e-5 (float32 sums over a 14-token batch); return the first run's gradients by name."""
    out = []
    for fn in fns:
        monkeypatch.setattr(module, attr, fn)
        model.zero_grad()
        loss = model(x, return_type="loss")
        loss.backward()
        out.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(out[0][0], out[1][0], atol=1e-6, rtol=0)
    for name, g in out[0][1].items():
        torch.testing.assert_close(g, out[1][1][name], atol=1e-5, rtol=0, msg=name)
    return out[0][1]
