"""The one non-finite guard (capture/finite.py) in the commands that compute from a model besides probe, diff,
trust and eval (issue 49): `tlm generate` refuses a model with an inf/NaN weight, or whose logits overflow, in
one `error:` line naming the weight or the logits, before any text (greedy decoding once turned NaN logits
into token 0 without a word); `tlm compare` (through training's validation and resume) refuses a checkpoint
with NaN weights and a model whose validation logits are not finite, instead of recording a NaN loss."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from cli import app
from tlm_probe.capture.finite import NonFiniteError
from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.hf import TLMForCausalLM, TLMHFConfig
from tlm_probe.tokenizer import ByteTokenizer

runner = CliRunner()


def _run(folder, poison: str, value: float):
    torch.manual_seed(0)
    model = TLMForCausalLM(TLMHFConfig(**TLMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=(64, 64),
                                                   max_seq_len=32).to_dict()))
    with torch.no_grad():
        dict(model.named_parameters())[poison].fill_(value)
    model.save_pretrained(folder)
    ByteTokenizer().save(folder)
    return folder


@pytest.mark.parametrize(("poison", "value", "says"), [
    ("blocks.1.mlp.W_in.weight", float("nan"), "non-finite weights (inf/NaN) in blocks.1.mlp.W_in.weight"),
    ("embed.weight", float("inf"), "non-finite weights (inf/NaN) in embed.weight"),
    # finite weights whose product overflows float32: the logits are inf
    ("ln_final.norm.weight", 3e38, "non-finite activations (inf/NaN) in "),
])
def test_generate_refuses_a_non_finite_model_in_one_line(tmp_path, poison, value, says):
    folder = _run(tmp_path / "run", poison, value)
    r = runner.invoke(app, ["generate", str(folder), "--prompt", "def ", "--max-new-tokens", "4", "--json"])
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and says in lines[0], r.output
    assert "Traceback" not in r.output and '"completion"' not in r.output
    if "activations" in says:
        assert lines[0].split(": the model")[0].endswith("in logits"), lines[0]


def test_generate_still_generates_from_a_finite_model(tmp_path):
    folder = _run(tmp_path / "run", "ln_final.norm.weight", 1.0)
    r = runner.invoke(app, ["generate", str(folder), "--prompt", "def ", "--max-new-tokens", "4", "--json"])
    assert r.exit_code == 0, r.output


class _Overflow(torch.nn.Module):
    """Logits that are inf at one position: what a float16 model's overflow looks like."""

    def forward(self, x):
        out = torch.zeros(*x.shape, 8)
        out[0, -1, 3] = float("inf")
        return out


def test_validation_refuses_non_finite_logits_instead_of_a_nan_loss():
    from tlm_probe.train.evaluate import evaluate

    windows = torch.randint(0, 8, (3, 5))
    with pytest.raises(NonFiniteError, match=r"non-finite activations \(inf/NaN\) in validation logits"):
        evaluate(_Overflow(), windows, None, 2, "cpu", contextlib.nullcontext)


def test_compare_refuses_to_resume_a_checkpoint_with_nan_weights(tmp_path):
    from tlm_probe.data.stream import TokenData
    from tlm_probe.train.checkpoint import step_folders
    from tlm_probe.train.compare import compare_arms, run_name
    from tlm_probe.train.config import TrainConfig

    base = TrainConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, multiple_of=16, seq_len=16, batch_size=2,
                       steps=4, eval_interval=2, eval_tokens=64, warmup=1, progress=False, data="synthetic",
                       threads=1)
    ids = np.random.default_rng(1).integers(97, 110, size=3000).astype(np.uint32)
    data = TokenData(ids[:2500], ids[2500:], ByteTokenizer(), "synthetic", 256)
    out = tmp_path / "cmp"
    compare_arms(base, ["uniform"], [0], out, data=data)
    run = out / "runs" / run_name("uniform", 0)
    (run / "run.json").unlink()  # as if it died after its last checkpoint
    weights = step_folders(run)[-1] / "model.safetensors"
    sd = load_file(str(weights))
    name = next(n for n in sd if "mlp" in n)
    sd[name] = torch.full_like(sd[name], float("nan"))
    save_file(sd, str(weights))
    with pytest.raises(UserError, match=rf"non-finite weights \(inf/NaN\) in {name.replace('.', '[.]')} of "):
        compare_arms(base, ["uniform"], [0], out, data=data)
    assert not (run / "run.json").exists()
