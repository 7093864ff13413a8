"""Tiny Hugging Face models of every supported family, built locally (no Hub) into a folder.

`build_model(family, folder)` writes config.json + model.safetensors + tokenizer files and returns the
folder; `FAMILIES` lists what it can build. Widths are tiny so that a forward pass takes milliseconds.
Shared helpers: other engineers' tests use them too, so keep the names stable.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    BertConfig,
    GPT2Config,
    GPTJConfig,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    OPTConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    RobertaConfig,
)

D, HEADS, LAYERS, VOCAB, CTX = 32, 4, 3, 320, 128

CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def f(x):\n    return x * 2  # double it\n",
    "Language models use their depth in ways we can measure with simple statistics.",
    "Tapered models shrink the MLP width with depth while keeping the parameter budget fixed.",
    "import os, sys\nprint(os.path.join('a', 'b'))\n",
]


def _causal_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )


def _encoder_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


_LLAMA_LIKE = dict(
    vocab_size=VOCAB,
    hidden_size=D,
    intermediate_size=80,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=2,
    max_position_embeddings=CTX,
)
_BERT_LIKE = dict(
    vocab_size=VOCAB,
    hidden_size=D,
    intermediate_size=72,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    max_position_embeddings=CTX + 2,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    pad_token_id=0,
)

# family -> (config factory, auto class, tokenizer factory)
_ZOO = {
    "gpt2": (
        lambda: GPT2Config(
            vocab_size=VOCAB,
            n_embd=D,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=CTX,
            n_inner=96,
            bos_token_id=0,
            eos_token_id=0,
        ),
        AutoModelForCausalLM,
        _causal_tokenizer,
    ),
    "llama": (lambda: LlamaConfig(**_LLAMA_LIKE), AutoModelForCausalLM, _causal_tokenizer),
    "mistral": (lambda: MistralConfig(**_LLAMA_LIKE), AutoModelForCausalLM, _causal_tokenizer),
    "qwen2": (lambda: Qwen2Config(**_LLAMA_LIKE), AutoModelForCausalLM, _causal_tokenizer),
    "gpt_neox": (
        lambda: GPTNeoXConfig(
            vocab_size=VOCAB,
            hidden_size=D,
            intermediate_size=64,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            max_position_embeddings=CTX,
            use_parallel_residual=True,
        ),
        AutoModelForCausalLM,
        _causal_tokenizer,
    ),
    "gpt_neox_seq": (
        lambda: GPTNeoXConfig(
            vocab_size=VOCAB,
            hidden_size=D,
            intermediate_size=64,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            max_position_embeddings=CTX,
            use_parallel_residual=False,
        ),
        AutoModelForCausalLM,
        _causal_tokenizer,
    ),
    "gptj": (
        lambda: GPTJConfig(
            vocab_size=VOCAB,
            n_embd=D,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=CTX,
            rotary_dim=4,
            n_inner=96,
            bos_token_id=0,
            eos_token_id=0,
        ),
        AutoModelForCausalLM,
        _causal_tokenizer,
    ),
    "opt": (
        lambda: OPTConfig(
            vocab_size=VOCAB,
            hidden_size=D,
            ffn_dim=88,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            max_position_embeddings=CTX,
            word_embed_proj_dim=D,
            pad_token_id=1,
            dropout=0.0,
        ),
        AutoModelForCausalLM,
        _causal_tokenizer,
    ),
    "bert": (lambda: BertConfig(**_BERT_LIKE), AutoModel, _encoder_tokenizer),
    "roberta": (lambda: RobertaConfig(**{**_BERT_LIKE, "pad_token_id": 1}), AutoModel, _encoder_tokenizer),
}
FAMILIES = tuple(_ZOO)


def build_model(family: str, folder: str | Path, seed: int = 0, tokenizer: bool = True) -> Path:
    """Save a randomly initialised tiny model of `family` (and its tokenizer) into `folder`."""
    make_config, auto, make_tok = _ZOO[family]
    return save_random(make_config(), auto, make_tok if tokenizer else None, folder, seed)


def save_random(config, auto, make_tok, folder: str | Path, seed: int) -> Path:
    """Save `auto.from_config(config)`, randomly initialised from `seed` with spread 1-d weights, and the
    tokenizer `make_tok()` (none when it is None) into `folder`."""
    torch.manual_seed(seed)
    model = auto.from_config(config).eval()
    _spread_weights(model)
    folder = Path(folder)
    model.save_pretrained(folder)
    if make_tok is not None:
        make_tok().save_pretrained(folder)
    return folder


def _spread_weights(model: torch.nn.Module) -> None:
    """Random-init LayerNorm weights/biases and biases are 1/0; perturb them so norms really matter."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
