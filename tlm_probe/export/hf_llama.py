"""A tlm attention model as a stock Hugging Face LlamaForCausalLM folder (config.json + model.safetensors
+ tokenizer files), written only where the installed transformers builds it right.

Our block is Llama's: pre-RMSNorm, softmax attention with grouped KV heads and rotate-half RoPE (the
layout of HF's Llama: no Q/K permutation), SwiGLU MLP down(silu(gate(x)) * up(x)), no biases. Per-layer
MLP widths or head counts need transformers' `per_layer_config` to be honoured by LlamaForCausalLM;
whether it is is checked at run time on a two-layer model on the meta device (per_layer_problem). And
every folder is loaded back with AutoModelForCausalLM before it is published: its logits must equal ours
in float64 (bound below), or nothing is written.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from tlm_probe.errors import UserError
from tlm_probe.export.support import LayerShapes, check_exportable, check_state_shapes

# our per-block weight -> LlamaForCausalLM's (model.layers.N.<name>)
_LAYER_NAMES = {
    "ln1.weight": "input_layernorm.weight",
    "attn.W_Q.weight": "self_attn.q_proj.weight",
    "attn.W_K.weight": "self_attn.k_proj.weight",
    "attn.W_V.weight": "self_attn.v_proj.weight",
    "attn.W_O.weight": "self_attn.o_proj.weight",
    "ln2.weight": "post_attention_layernorm.weight",
    "mlp.W_gate.weight": "mlp.gate_proj.weight",
    "mlp.W_in.weight": "mlp.up_proj.weight",
    "mlp.W_out.weight": "mlp.down_proj.weight",
}
# LayerShapes field -> LlamaConfig attribute; with the value a two-layer probe gives its layer 1 and the
# weight (and its expected shape in that probe) that shows whether layer 1 got it
_PER_LAYER = {
    "d_ff": ("intermediate_size", 16, "mlp.gate_proj.weight", (16, 16)),
    "heads": ("num_attention_heads", 2, "self_attn.q_proj.weight", (8, 16)),
    "kv_heads": ("num_key_value_heads", 1, "self_attn.k_proj.weight", (4, 16)),
}
PROBE = dict(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=4)
HF_FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt")


@functools.cache
def per_layer_problem(field: str) -> str:
    """'' when the installed transformers builds LlamaForCausalLM layers with a per-layer `field` (a
    LayerShapes field) from `per_layer_config`; else the reason, naming the transformers version."""
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    attr, value, weight, shape = _PER_LAYER[field]
    where = f"transformers {transformers.__version__}"
    try:
        config = LlamaConfig(**PROBE, per_layer_config={1: {attr: value}})
        with torch.device("meta"):
            built = LlamaForCausalLM(config)
    except Exception as e:  # 5.24: AmbiguousGlobalPerLayerAttributeError from the layers' constructors
        return f"{where} cannot build a LlamaForCausalLM with a per-layer {attr} ({type(e).__name__})"
    got = tuple(built.state_dict()[f"model.layers.1.{weight}"].shape)
    if got != shape:
        return f"{where} accepts a per-layer {attr} but builds layer 1's {weight} as {got}, not {shape}"
    return ""


def llama_config(cfg, shapes: LayerShapes, tokenizer):
    from transformers import LlamaConfig

    overrides: dict[int, dict] = {}
    for field, (attr, *_rest) in _PER_LAYER.items():
        values = getattr(shapes, field)
        for l, v in enumerate(values):
            if v != values[0]:
                overrides.setdefault(l, {})[attr] = v
    eos = getattr(tokenizer, "eos_id", None)
    kwargs = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=shapes.d_ff[0],
        num_hidden_layers=cfg.n_layers, num_attention_heads=shapes.heads[0],
        num_key_value_heads=shapes.kv_heads[0], head_dim=shapes.d_head, hidden_act="silu",
        max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
        attention_bias=False, mlp_bias=False, bos_token_id=eos, eos_token_id=eos, pad_token_id=None,
        architectures=["LlamaForCausalLM"],
    )
    if overrides:
        kwargs["per_layer_config"] = overrides
    return LlamaConfig(**kwargs)


def llama_state(state: dict, cfg) -> dict[str, torch.Tensor]:
    out = {"model.embed_tokens.weight": state["embed.weight"],
           "model.norm.weight": state["ln_final.norm.weight"]}
    for l in range(cfg.n_layers):
        for ours, theirs in _LAYER_NAMES.items():
            out[f"model.layers.{l}.{theirs}"] = state[f"blocks.{l}.{ours}"]
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = state["unembed.weight"]
    return {k: v.detach().to("cpu").contiguous() for k, v in out.items()}


def check_hf_llama(cfg) -> LayerShapes:
    """Everything that can refuse the export, before any file is written."""
    shapes = check_exportable(cfg, "a Hugging Face Llama")
    for field, values in shapes.per_layer().items():
        if len(set(values)) > 1:
            problem = per_layer_problem(field)
            if problem:
                raise UserError(f"cannot export this model as a stock Llama: its {field} varies by layer and "
                                f"{problem}; nothing written (`tlm export --gguf` can hold it)")
    return shapes


def build_llama(model, tokenizer):
    """A LlamaForCausalLM (float32, CPU, eval) holding `model`'s weights."""
    from transformers import LlamaForCausalLM

    cfg = model.cfg
    shapes = check_hf_llama(cfg)
    state = model.state_dict()
    check_state_shapes(state, shapes, cfg.d_model)
    config = llama_config(cfg, shapes, tokenizer)
    llama = LlamaForCausalLM(config)  # on the CPU: its rotary tables are computed as transformers does
    missing, unexpected = llama.load_state_dict(llama_state(state, cfg), strict=False)
    tied = {"lm_head.weight"} if cfg.tie_embeddings else set()  # the same tensor as embed_tokens
    if set(missing) - tied or unexpected:
        raise UserError(f"cannot map the weights onto LlamaForCausalLM: missing "
                        f"{sorted(set(missing) - tied)[:2]}, unexpected {sorted(unexpected)[:2]}")
    if cfg.tie_embeddings and llama.lm_head.weight.data_ptr() != llama.model.embed_tokens.weight.data_ptr():
        raise UserError("cannot export: LlamaForCausalLM did not tie its output matrix to the embedding")
    return llama.float().eval()


def logits_bound(cfg, scale: float, n_tokens: int, eps: float) -> float:
    """Two float64 forwards of the same weights differ by reassociation only: per layer, sums of at most
    d_model + T + d_ff terms each rounded at relative eps; times 16 for the layers' compounding and the
    softmax/norm rescaling, times the logits' scale."""
    return 16 * eps * (cfg.d_model + n_tokens + max(cfg.d_ff)) * cfg.n_layers * max(1.0, scale)


def verify_folder(folder: Path, model) -> float:
    """Load `folder` with AutoModelForCausalLM and compare its float64 logits with ours; the max |diff|."""
    from transformers import AutoModelForCausalLM

    cfg = model.cfg
    T = min(cfg.max_seq_len, 24)
    ids = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    try:
        loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float64).eval()
    except Exception as e:
        raise UserError(f"the written Llama folder does not load back ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]}); nothing written") from None
    ours = _double_copy(model)
    with torch.no_grad():
        want = ours(ids)
        got = loaded(input_ids=ids).logits
    diff = float((want - got).abs().max())
    bound = logits_bound(cfg, float(want.abs().max()), T, torch.finfo(torch.float64).eps)
    if not diff <= bound:
        raise UserError(f"the written Llama folder's logits differ from the model's by {diff:.3g} (bound "
                        f"{bound:.3g}): transformers does not run it as we do; nothing written")
    return diff


def _double_copy(model):
    from tlm_probe.models.tlm import TaperedLM

    twin = TaperedLM(model.cfg)
    twin.load_state_dict(model.state_dict())
    return twin.double().eval()


def save_llama(llama, tokenizer, folder: Path) -> str:
    """save_pretrained into `folder` (safetensors) and the tokenizer's files; a note about the tokenizer."""
    llama.save_pretrained(str(folder), safe_serialization=True)
    kind = getattr(tokenizer, "kind", None)
    if kind in ("bpe", "hf"):
        tokenizer.tok.save_pretrained(str(folder))
        return f"tokenizer included ({kind}, {tokenizer.vocab_size} ids)"
    return ("no tokenizer included: the byte-level tokenizer has no Hugging Face equivalent" if kind == "byte"
            else "no tokenizer included: the checkpoint folder holds none")
