"""Tiny random models of the families added in issue 20, from the installed transformers config classes.

Each entry: variant name -> (config factory, auto class). The models are built like models_zoo's (its
tokenizers and weight spreading: norm weights perturbed so that a tap one norm off cannot hide), and small
enough that a forward pass takes milliseconds. Settings that change the arithmetic are chosen so that a
wrong adapter row shows: Granite's residual_multiplier is 0.5 (1.0 would hide a missing multiplier), OPT's
word_embed_proj_dim differs from hidden_size (project_out between the last block and the head), BERT
chunks its feed-forward over positions.
"""

from __future__ import annotations

from pathlib import Path

import transformers as T
from models_zoo import CTX, HEADS, LAYERS, VOCAB, D, _causal_tokenizer, _encoder_tokenizer, save_random

_BASE = dict(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS)
_ROPE = dict(**_BASE, intermediate_size=80, max_position_embeddings=CTX)
_GQA = dict(**_ROPE, num_key_value_heads=2)
_MOE = dict(**_GQA, num_experts_per_tok=2)
C, E = T.AutoModelForCausalLM, T.AutoModel

FAMILY_MODELS = {
    "phi3": (lambda: T.Phi3Config(**_GQA, pad_token_id=0), C),
    "starcoder2": (lambda: T.Starcoder2Config(**_GQA), C),
    "smollm3": (lambda: T.SmolLM3Config(**_GQA, pad_token_id=0), C),
    "stablelm": (lambda: T.StableLmConfig(**_GQA, use_parallel_residual=False), C),
    "stablelm_parallel": (lambda: T.StableLmConfig(**_GQA, use_parallel_residual=True), C),
    "granite": (lambda: T.GraniteConfig(**_GQA, residual_multiplier=0.5, embedding_multiplier=2.0), C),
    "cohere": (lambda: T.CohereConfig(**_GQA, logit_scale=1.0, pad_token_id=0), C),
    "phi": (lambda: T.PhiConfig(**_ROPE, partial_rotary_factor=0.5), C),
    "gpt_bigcode": (
        lambda: T.GPTBigCodeConfig(
            vocab_size=VOCAB,
            n_embd=D,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=CTX,
            n_inner=72,
            multi_query=True,
        ),
        C,
    ),
    "codegen": (
        lambda: T.CodeGenConfig(
            vocab_size=VOCAB,
            n_embd=D,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=CTX,
            n_ctx=CTX,
            rotary_dim=4,
            n_inner=72,
            bos_token_id=0,
            eos_token_id=0,
        ),
        C,
    ),
    "gemma2": (lambda: T.Gemma2Config(**_GQA, head_dim=8, final_logit_softcapping=None, pad_token_id=0), C),
    "gemma3_text": (
        lambda: T.Gemma3TextConfig(
            **_GQA, head_dim=8, final_logit_softcapping=None, sliding_window=4, pad_token_id=0
        ),
        C,
    ),
    "olmo2": (lambda: T.Olmo2Config(**_GQA, pad_token_id=0), C),
    "bloom": (lambda: T.BloomConfig(vocab_size=VOCAB, hidden_size=D, n_layer=LAYERS, n_head=HEADS), C),
    "falcon_seq": (
        lambda: T.FalconConfig(
            **_BASE,
            new_decoder_architecture=False,
            parallel_attn=False,
            alibi=False,
            bias=True,
            ffn_hidden_size=72,
        ),
        C,
    ),
    "falcon_parallel": (
        lambda: T.FalconConfig(
            **_BASE, new_decoder_architecture=False, parallel_attn=True, alibi=True, ffn_hidden_size=72
        ),
        C,
    ),
    "falcon_new": (
        lambda: T.FalconConfig(
            **_BASE,
            new_decoder_architecture=True,
            num_kv_heads=2,
            num_ln_in_parallel_attn=2,
            ffn_hidden_size=72,
        ),
        C,
    ),
    "opt_post_ln": (
        lambda: T.OPTConfig(
            vocab_size=VOCAB,
            hidden_size=D,
            ffn_dim=88,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            max_position_embeddings=CTX,
            word_embed_proj_dim=16,
            do_layer_norm_before=False,
            pad_token_id=1,
            dropout=0.0,
        ),
        C,
    ),
    "bert_chunked": (
        lambda: T.BertConfig(
            **_BASE,
            intermediate_size=72,
            max_position_embeddings=CTX + 2,
            pad_token_id=0,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            chunk_size_feed_forward=4,
        ),
        E,
    ),
    "distilbert": (
        lambda: T.DistilBertConfig(
            vocab_size=VOCAB,
            dim=D,
            n_layers=LAYERS,
            n_heads=HEADS,
            hidden_dim=72,
            max_position_embeddings=CTX,
            pad_token_id=0,
            dropout=0.0,
            attention_dropout=0.0,
        ),
        E,
    ),
    "modernbert": (
        lambda: T.ModernBertConfig(
            **_BASE,
            intermediate_size=40,
            max_position_embeddings=CTX,
            pad_token_id=0,
            global_attn_every_n_layers=2,
            local_attention=8,
        ),
        E,
    ),
    "mixtral": (lambda: T.MixtralConfig(**_MOE, num_local_experts=4), C),
    "qwen2_moe": (
        lambda: T.Qwen2MoeConfig(
            **_MOE,
            num_experts=4,
            moe_intermediate_size=24,
            shared_expert_intermediate_size=40,
            mlp_only_layers=[1],
        ),
        C,
    ),
    "qwen3_moe": (lambda: T.Qwen3MoeConfig(**_MOE, num_experts=4, moe_intermediate_size=24, head_dim=8), C),
    "olmoe": (lambda: T.OlmoeConfig(**_MOE, num_experts=4), C),
    "gpt_oss": (
        lambda: T.GptOssConfig(
            **{**_MOE, "intermediate_size": 24},
            num_local_experts=4,
            head_dim=8,
            sliding_window=4,
            pad_token_id=0,
        ),
        C,
    ),
    "deepseek_v3": (
        lambda: T.DeepseekV3Config(
            **{**_MOE, "num_key_value_heads": HEADS},
            moe_intermediate_size=24,
            n_routed_experts=4,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            kv_lora_rank=16,
            q_lora_rank=None,
            qk_rope_head_dim=4,
            qk_nope_head_dim=4,
            v_head_dim=8,
            pad_token_id=0,
        ),
        C,
    ),
    "mamba": (
        lambda: T.MambaConfig(
            vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS, state_size=4, expand=2
        ),
        C,
    ),
}
ENCODERS = ("bert_chunked", "distilbert", "modernbert")


def build_family(variant: str, folder: str | Path, seed: int = 0) -> Path:
    """Save a random tiny model of `variant` (and a tokenizer) into `folder`."""
    make_config, auto = FAMILY_MODELS[variant]
    tokenizer = _encoder_tokenizer if variant in ENCODERS else _causal_tokenizer
    return save_random(make_config(), auto, tokenizer, folder, seed)
