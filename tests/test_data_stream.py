"""Tokenizers, prepared shards, the batch order and the fixed evaluation set."""

import json

import numpy as np
import pytest
import torch

from tlm_probe.data import iter_documents, load_token_ids, read_shard_header
from tlm_probe.data.prepare import prepare
from tlm_probe.data.stream import BatchOrder, eval_windows, load_token_data, tokenize_documents
from tlm_probe.tokenizer import ByteTokenizer, load_saved_tokenizer, make_tokenizer


@pytest.fixture
def corpus(tmp_path) -> str:
    text = "\n\n".join(f"doc {i}: résumé of layer {i % 7}, width {i * 64} — naïve café" for i in range(300))
    (tmp_path / "c.txt").write_text(text, encoding="utf-8")
    return str(tmp_path / "c.txt")


def test_byte_tokenizer_is_utf8():
    tok = ByteTokenizer()
    ids = tok.encode("naïve ☕")
    assert (
        ids.tolist() == list("naïve ☕".encode()) and tok.decode(ids) == "naïve ☕" and tok.n_bytes(ids) == 10
    )


def test_bpe_is_deterministic_roundtrips_and_loads_with_transformers(tmp_path, corpus):
    from transformers import AutoTokenizer

    docs = list(iter_documents(corpus, "train"))
    a, b = make_tokenizer("bpe:400", docs), make_tokenizer("bpe:400", docs)
    assert a.hash == b.hash and a.vocab_size == 400 and a.eos_id == 0
    text = docs[3]
    assert a.decode(a.encode(text)) == text and a.n_bytes(a.encode(text)) == len(text.encode())
    a.save(tmp_path / "tok")
    assert load_saved_tokenizer(tmp_path / "tok").hash == a.hash
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))  # an independent loader
    assert hf(text, add_special_tokens=False)["input_ids"] == a.encode(text).tolist()


def test_prepared_shards_equal_direct_tokenization(tmp_path, corpus):
    meta = prepare(corpus, tmp_path / "prep", tokenizer="bpe:400", shard_tokens=2000)
    assert meta["train"]["shards"] > 1 and meta["vocab_size"] == 400
    header = read_shard_header(tmp_path / "prep" / "train" / "shard_00000.tok")
    tok = load_saved_tokenizer(tmp_path / "prep" / "tokenizer")
    assert header["tokenizer_hash"] == tok.hash == meta["tokenizer_hash"] and header["dtype"] == "uint32"
    direct = tokenize_documents(iter_documents(corpus, "train"), tok)
    assert load_token_ids(tmp_path / "prep", "train").tolist() == direct.tolist()
    data = load_token_data(str(tmp_path / "prep"))
    assert data.vocab_size == 400 and len(data.train) == meta["train"]["tokens"]
    # the shards stay separate memory maps; slices across shard boundaries read the same ids
    for start, stop in ((0, 10), (1990, 2010), (1500, 4600), (len(direct) - 5, len(direct))):
        assert data.train[start:stop].tolist() == direct[start:stop].tolist()
    assert len(data.val) == meta["val"]["tokens"] > 0


def test_bare_token_file_holds_out_its_tail(tmp_path):
    ids = np.arange(1000, dtype=np.int32) % 300
    np.save(tmp_path / "ids.npy", ids)
    data = load_token_data(str(tmp_path / "ids.npy"))
    assert data.tokenizer is None and data.vocab_size == 300
    assert data.train.tolist() == ids[:950].tolist() and data.val.tolist() == ids[950:].tolist()


def test_batch_order_visits_every_window_once_per_epoch():
    ids = np.arange(16 * 10 + 1, dtype=np.uint32)
    order = BatchOrder(ids, seq_len=16, seed=3)
    rows = order.samples(0, 20)  # two epochs
    for epoch in (rows[:10], rows[10:]):
        starts = sorted(int(r[0]) for r in epoch)
        assert starts == list(range(0, 160, 16))
    assert all(torch.equal(r[1:], r[:-1] + 1) for r in rows)  # contiguous windows of seq_len + 1
    assert not torch.equal(rows[:10], rows[10:])  # a fresh permutation each epoch
    assert torch.equal(BatchOrder(ids, 16, 3).samples(0, 20), rows)  # a function of data and seed only
    assert not torch.equal(BatchOrder(ids, 16, 4).samples(0, 10), rows[:10])


def test_ranks_and_accumulation_split_one_global_batch():
    ids = np.arange(8 * 100 + 1, dtype=np.uint32)
    order = BatchOrder(ids, seq_len=8, seed=0)
    single = order.micro_batch(step=5, micro=0, rank=0, batch=8, accum=1, world=1)
    parts = [order.micro_batch(5, m, r, batch=2, accum=2, world=2) for m in range(2) for r in range(2)]
    assert torch.equal(torch.cat(parts), single)


def test_eval_windows_predict_each_token_once():
    val = np.arange(1, 200, dtype=np.uint32)
    w = eval_windows(val, seq_len=16, max_tokens=64, sample="prefix")
    assert w.shape == (4, 17)
    assert torch.cat([row[1:] for row in w]).tolist() == val[1:65].tolist()


def test_training_from_prepared_shards_carries_the_tokenizer(tmp_path, corpus):
    from transformers import AutoTokenizer

    from tlm_probe.train.config import TrainConfig
    from tlm_probe.train.loop import Trainer
    from tlm_probe.train.run import plan_run

    prepare(corpus, tmp_path / "prep", tokenizer="bpe:400", shard_tokens=2000)
    tc = TrainConfig(data=str(tmp_path / "prep"), d_model=32, n_layers=2, n_heads=2, d_ff=64, seq_len=16,
                     batch_size=2, steps=2, eval_tokens=32, progress=False)
    summary = Trainer(plan_run(tc, tmp_path / "run")).run()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["vocab_size"] == 400
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "run"))  # the checkpoint folder carries it
    assert len(tok) == 400 and summary["val_bpb"] is not None


def test_run_training_reads_a_folder_of_several_shards(tmp_path, corpus):
    """The whole `tlm train` path (run_training, with its progress lines) on shards held as one ConcatIds:
    its data line once asked the ConcatIds for a numpy `.size` and every such run died before step 1."""
    from tlm_probe.train.config import TrainConfig
    from tlm_probe.train.training import run_training

    meta = prepare(corpus, tmp_path / "prep", tokenizer="bpe:400", shard_tokens=2000)
    assert meta["train"]["shards"] > 1
    tc = TrainConfig(data=str(tmp_path / "prep"), d_model=32, n_layers=2, n_heads=2, d_ff=64, seq_len=16,
                     batch_size=2, steps=2, eval_tokens=32, progress=True)
    summary = run_training(tc, tmp_path / "run")
    assert summary["step"] == 2
