"""HookedTransformer's everyday attributes on our models: model.tokenizer, to_tokens, to_string, W_U, W_E
(and W_pos with learned positions), in TransformerLens's orientations.

model.tokenizer is a Hugging Face tokenizer (what HookedTransformer holds), or None. load_tlm attaches a
run folder's, read on first use: its tokenizer files, or for a byte run that has only tlm_tokenizer.json
the byte tokenizer as AutoTokenizer builds it (models/hf_tokenizer.py); the ids are those the run was
trained with (tokenizer.load_saved_tokenizer's; models/hf_tokenizer.py folder_tokenizer).

to_tokens encodes as training did (no special tokens added) and prepends the tokenizer's BOS only when it
has one: none of ours (byte, trained BPE) has, so their text starts at its first byte / token, as training
windows do; a Hugging Face tokenizer with a BOS (GPT-2's <|endoftext|>) gets it, as HookedTransformer does.
"""

from __future__ import annotations

import torch

from tlm_probe.errors import UserError


class TLHabits:
    """Mixed into TaperedLM and TLMForCausalLM (both have embed, unembed and pos_embed)."""

    _tokenizer = None  # a model built in code has none until one is set
    _tokenizer_folder = None  # load_tlm's run folder: its tokenizer is read when first asked for

    @property
    def tokenizer(self):
        """The Hugging Face tokenizer, or None; a run folder's is loaded on first use (a probe or a
        training run that never asks for it does not pay for it, nor fail on its files)."""
        if self._tokenizer is None and self._tokenizer_folder is not None:
            from tlm_probe.models.hf_tokenizer import folder_tokenizer  # transformers: only when asked

            self._tokenizer, self._tokenizer_folder = folder_tokenizer(self._tokenizer_folder), None
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, value) -> None:
        self._tokenizer, self._tokenizer_folder = value, None

    @property
    def W_U(self) -> torch.Tensor:
        """The unembedding (d_model, d_vocab), TransformerLens's orientation (a view of unembed.weight)."""
        return self.unembed.weight.T

    @property
    def W_E(self) -> torch.Tensor:
        """The token embedding (d_vocab, d_model)."""
        return self.embed.weight

    @property
    def W_pos(self) -> torch.Tensor:
        """The learned position embedding (n_ctx, d_model); a RoPE model has none (AttributeError, as
        HookedTransformer's; nn.Module words the message)."""
        if self.pos_embed is None:
            raise AttributeError("W_pos")
        return self.pos_embed.weight

    def to_tokens(self, text: str, prepend_bos: bool | None = None) -> torch.Tensor:
        """(1, T) LongTensor of `text`'s ids on the model's device. prepend_bos: None = when the tokenizer
        has a BOS token (see the module docstring); True without one is an error."""
        tok = self._require_tokenizer("to_tokens")
        if not isinstance(text, str):
            raise TypeError(f"to_tokens takes one string, got {type(text).__name__}; for a padded batch "
                            "use model.tokenizer(texts, padding=True) and pass its attention_mask")
        ids = list(tok(text, add_special_tokens=False)["input_ids"])
        bos = getattr(tok, "bos_token_id", None)
        if prepend_bos and bos is None:
            raise ValueError("prepend_bos=True, but this model's tokenizer has no BOS token")
        if bos is not None and prepend_bos is not False:
            ids = [bos, *ids]
        return torch.tensor([ids], dtype=torch.long, device=self.embed.weight.device)

    def to_string(self, tokens) -> str | list[str]:
        """The text of a 1-D sequence of ids (special tokens kept, as HookedTransformer decodes); a list of
        texts for a (B, T) batch."""
        tok = self._require_tokenizer("to_string")
        tokens = torch.as_tensor(tokens)
        if tokens.ndim == 2:
            return [tok.decode(row.tolist()) for row in tokens]
        if tokens.ndim != 1:
            raise ValueError(f"to_string takes ids of shape (T,) or (B, T), got {tuple(tokens.shape)}")
        return tok.decode(tokens.tolist())

    def _require_tokenizer(self, what: str):
        if self.tokenizer is None:
            raise UserError(f"{what}: this model has no tokenizer; load a run folder that has one with "
                            "tlm_probe.models.io.load_tlm, or set model.tokenizer (a Hugging Face tokenizer)")
        return self.tokenizer

