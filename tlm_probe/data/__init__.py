"""Data: text sources with a deterministic split, token shards, and (in stream) the training batches."""

from tlm_probe.data.sources import SOURCE_HELP, iter_documents, split_of
from tlm_probe.data.tokens import load_token_ids, read_shard_header, write_shard

__all__ = ["SOURCE_HELP", "iter_documents", "split_of", "load_token_ids", "read_shard_header", "write_shard"]
