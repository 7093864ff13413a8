"""Data sources, the deterministic split and token files."""

import hashlib
import json

import numpy as np
import pytest
import torch

from tlm_probe.data import iter_documents, load_token_ids, read_shard_header, split_of, write_shard
from tlm_probe.errors import UserError


def test_split_is_a_stable_hash_partition():
    docs = list(iter_documents("builtin:pydoc"))
    train = list(iter_documents("builtin:pydoc", "train"))
    val = list(iter_documents("builtin:pydoc", "val"))
    assert len(train) + len(val) == len(docs) and val and train
    assert not set(val) & set(train)
    # independent recomputation of the rule: blake2b-64 of the UTF-8 text, 5 % to validation
    expected = [d for d in docs if int(hashlib.blake2b(d.encode(), digest_size=8).hexdigest(), 16) % 100 < 5]
    assert val == expected
    assert split_of("hello world") == split_of("hello world")
    assert list(iter_documents("builtin:pydoc", "val")) == val  # same on a second run


def test_pydoc_corpus_holds_the_language_reference():
    from pydoc_data.topics import topics

    docs = list(iter_documents("builtin:pydoc"))
    assert docs[: len(topics)] == [topics[k] for k in sorted(topics)]
    assert len(docs) > len(topics)  # plus stdlib docstrings


def test_text_file_folder_glob_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("first paragraph\nline two\n\n\nsecond paragraph\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("third\n")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    paragraphs = ["first paragraph\nline two\n", "second paragraph\n"]
    assert list(iter_documents(str(tmp_path / "a.txt"))) == paragraphs
    assert list(iter_documents(str(tmp_path)))[-1] == "third\n"
    assert len(list(iter_documents(str(tmp_path / "**" / "*.md")))) == 1
    rows = [{"text": "x y z", "body": "b1"}, {"text": "p q", "body": "b2"}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert list(iter_documents(str(tmp_path / "d.jsonl"))) == ["x y z", "p q"]
    assert list(iter_documents(f"{tmp_path / 'd.jsonl'}:body")) == ["b1", "b2"]


def test_hf_load_from_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": ["alpha", "beta", ""]}).save_to_disk(str(tmp_path / "ds"))
    assert list(iter_documents(str(tmp_path / "ds"))) == ["alpha", "beta"]


@pytest.mark.parametrize("source", ["nope/missing.txt", "builtin:nothing", "EMPTY", "x.jsonl:text"])
def test_bad_sources_raise_user_error(tmp_path, source):
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    source = str(tmp_path / "empty.txt") if source == "EMPTY" else str(tmp_path / source)
    if "builtin" in source:
        source = "builtin:nothing"
    with pytest.raises(UserError):
        list(iter_documents(source))


def test_shard_roundtrip_and_other_formats(tmp_path):
    ids = np.array([0, 5, 128_255, 70_000], dtype=np.int64)  # ids above 65,535 need uint32
    write_shard(tmp_path / "s.tok", ids, vocab_size=128_256, tokenizer_hash="abc", n_bytes=9)
    header = read_shard_header(tmp_path / "s.tok")
    assert header == {"dtype": "uint32", "vocab_size": 128_256, "tokenizer_hash": "abc", "n_tokens": 4,
                      "n_bytes": 9}
    raw = (tmp_path / "s.tok").read_bytes()
    assert np.frombuffer(raw[256:], dtype="<u4").tolist() == ids.tolist()
    got = load_token_ids(tmp_path / "s.tok")
    assert got.dtype == np.uint32 and got.tolist() == ids.tolist()
    np.save(tmp_path / "a.npy", ids)
    torch.save(torch.tensor(ids), tmp_path / "a.pt")
    assert load_token_ids(tmp_path / "a.npy").tolist() == ids.tolist()
    assert load_token_ids(tmp_path / "a.pt").tolist() == ids.tolist()
    assert load_token_ids(tmp_path).tolist() == ids.tolist()  # a folder of shards


def test_bad_token_files(tmp_path):
    with pytest.raises(UserError):
        write_shard(tmp_path / "v.tok", np.array([300]), vocab_size=256, tokenizer_hash="h", n_bytes=1)
    assert not (tmp_path / "v.tok").exists()
    write_shard(tmp_path / "t.tok", np.arange(10), vocab_size=256, tokenizer_hash="h", n_bytes=10)
    (tmp_path / "t.tok").write_bytes((tmp_path / "t.tok").read_bytes()[:-3])
    for bad in ("t.tok", "missing.npy"):
        with pytest.raises(UserError):
            load_token_ids(tmp_path / bad)
    np.save(tmp_path / "f.npy", np.ones(3, dtype=np.float32))
    with pytest.raises(UserError):
        load_token_ids(tmp_path / "f.npy")


def test_prepare_takes_the_cli_options_object(tmp_path):
    """tlm data prepare's options are PrepareOptions' fields (one default each), and the library's prepare()
    takes the same object, or its fields as keywords."""
    import typer.main
    from typer.testing import CliRunner

    from cli import app
    from tlm_probe.commands.options import cli_fields
    from tlm_probe.data.options import PrepareOptions
    from tlm_probe.data.prepare import prepare

    group = typer.main.get_group(app).commands["data"]
    params = {p.name: p for p in group.commands["prepare"].params}
    for f in cli_fields(PrepareOptions):
        assert params[f.name].default == f.default, f.name
    (tmp_path / "c.txt").write_text("\n\n".join(f"paragraph {i} of the corpus" for i in range(300)))
    src = str(tmp_path / "c.txt")
    by_object = prepare(src, tmp_path / "a", PrepareOptions(shard_tokens=500))
    by_keyword = prepare(src, tmp_path / "b", shard_tokens=500)
    r = CliRunner().invoke(app, ["data", "prepare", src, "--shard-tokens", "500", "--json",
                                 "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert by_object == by_keyword == json.loads(r.stdout) and by_object["train"]["shards"] > 1
    for bad, needle in (({"shard_tokens": 0}, r"shard_tokens must be an integer in \[1, "),
                        ({"tokenizer": "bpe:x"}, "bpe:VOCAB_SIZE")):
        with pytest.raises(UserError, match=needle):
            prepare(src, tmp_path / "d", **bad)
    assert not (tmp_path / "d").exists()
