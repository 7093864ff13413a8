"""PrepareOptions: how `tlm data prepare` tokenizes a source (what its meta.json records besides the
source). A kw-only frozen dataclass whose field docstrings are the help: the CLI's options are generated
from it (commands/options.py) and the library's prepare() takes it, so the two share one default. Light:
no tokenizer is built here."""

from __future__ import annotations

from dataclasses import dataclass

from tlm_probe.ranges import check_values


@dataclass(frozen=True, kw_only=True)
class PrepareOptions:
    """How a source is tokenized into shards."""

    tokenizer: str = "byte"
    """byte | bpe[:VOCAB] | Hugging Face tokenizer folder/name."""
    shard_tokens: int = 100_000_000
    """Tokens per shard file."""

    def __post_init__(self):
        check_values(self)
        from tlm_probe.tokenizer import check_vocab_size, parse_bpe

        parse_bpe(self.tokenizer)  # a malformed bpe:VOCAB is refused before any file is read
        check_vocab_size(self.tokenizer)  # so is a tokenizer.json too big to build
