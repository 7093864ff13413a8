"""A tlm attention model as one GGUF file (llama.cpp's format), float32, tensors named and laid out as
llama.cpp's convert_hf_to_gguf.py writes a Llama.

- Architecture: "llama" when every block has the same MLP width, heads and KV heads; "deci" (DeciLM /
  Nemotron-NAS, the same tensors and graph) when they vary. llama.cpp's loader accepts per-layer arrays for
  `{arch}.feed_forward_length`, `.attention.head_count` and `.attention.head_count_kv` for any
  architecture, but its "llama" arch sizes every block's tensors with layer 0's values (and refuses the
  file); "deci" sizes each block with its own (llama-model.cpp, LLM_ARCH_DECI). Each is a scalar when it
  is the same in every block, an array otherwise.
- Rotary: ours is the rotate-half layout (pairs i, i + d/2, as Hugging Face's Llama); llama.cpp's
  "normal" RoPE rotates adjacent pairs, so Q and K rows are permuted (support.rope_interleave).
- `{arch}.attention.key_length`/`value_length` are written: with per-layer heads llama.cpp's default
  head size (embedding / layer 0's heads) would be wrong.
- The file is written under a temporary name, read back with gguf.GGUFReader (every tensor and key
  compared), then renamed into place; `tlm_probe.exported_by` marks it as ours (--overwrite replaces
  only such a file).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tlm_probe import __version__
from tlm_probe.errors import UserError
from tlm_probe.export.gguf_vocab import add_vocab, vocab_metadata
from tlm_probe.export.support import LayerShapes, check_exportable, check_state_shapes, rope_interleave
from tlm_probe.files.fileio import atomic_path

MARKER = "tlm_probe.exported_by"
ALL_F32 = 0  # general.file_type: LLAMA_FTYPE_ALL_F32
# our per-block weight -> llama.cpp's name (blk.N.<name>)
_LAYER_NAMES = {
    "ln1.weight": "attn_norm.weight",
    "attn.W_Q.weight": "attn_q.weight",
    "attn.W_K.weight": "attn_k.weight",
    "attn.W_V.weight": "attn_v.weight",
    "attn.W_O.weight": "attn_output.weight",
    "ln2.weight": "ffn_norm.weight",
    "mlp.W_gate.weight": "ffn_gate.weight",
    "mlp.W_in.weight": "ffn_up.weight",
    "mlp.W_out.weight": "ffn_down.weight",
}
PERMUTED = {"attn_q.weight": "heads", "attn_k.weight": "kv_heads"}  # name -> the head count its rows hold


def gguf_tensors(state: dict, cfg, shapes: LayerShapes) -> dict[str, np.ndarray]:
    """GGUF name -> float32 array (rows, cols as PyTorch's (out, in): GGUF stores the dims reversed)."""
    arr = {k: v.detach().to("cpu").float().contiguous().numpy() for k, v in state.items()}
    out = {"token_embd.weight": arr["embed.weight"]}
    for l in range(cfg.n_layers):
        for ours, theirs in _LAYER_NAMES.items():
            w = arr[f"blocks.{l}.{ours}"]
            if theirs in PERMUTED:
                w = rope_interleave(w, getattr(shapes, PERMUTED[theirs])[l])
            out[f"blk.{l}.{theirs}"] = np.ascontiguousarray(w)
    out["output_norm.weight"] = arr["ln_final.norm.weight"]
    if not cfg.tie_embeddings:  # absent output.weight: llama.cpp (and transformers) tie it to token_embd
        out["output.weight"] = arr["unembed.weight"]
    return out


def _scalar_or_list(values: tuple[int, ...]) -> int | list[int]:
    return values[0] if len(set(values)) == 1 else list(values)


def gguf_metadata(cfg, shapes: LayerShapes, arch: str, source: str) -> dict:
    """key -> value of every key this exporter writes (the read-back compares each)."""
    a = arch
    meta = {
        "general.architecture": arch, "general.name": Path(source).name or "tlm",
        "general.file_type": ALL_F32,
        f"{a}.context_length": cfg.max_seq_len, f"{a}.embedding_length": cfg.d_model,
        f"{a}.block_count": cfg.n_layers, f"{a}.feed_forward_length": _scalar_or_list(shapes.d_ff),
        f"{a}.attention.head_count": _scalar_or_list(shapes.heads),
        f"{a}.attention.head_count_kv": _scalar_or_list(shapes.kv_heads),
        f"{a}.attention.key_length": shapes.d_head, f"{a}.attention.value_length": shapes.d_head,
        f"{a}.rope.dimension_count": shapes.d_head, f"{a}.rope.freq_base": float(np.float32(cfg.rope_theta)),
        f"{a}.attention.layer_norm_rms_epsilon": float(np.float32(cfg.norm_eps)),
        f"{a}.vocab_size": cfg.vocab_size,
        MARKER: f"tlm_probe {__version__}", "tlm_probe.config": json.dumps(cfg.to_dict(), sort_keys=True),
    }
    return meta


def _add_metadata(writer, meta: dict, arch: str) -> None:
    a = arch
    writer.add_name(meta["general.name"])
    writer.add_file_type(ALL_F32)
    writer.add_context_length(meta[f"{a}.context_length"])
    writer.add_embedding_length(meta[f"{a}.embedding_length"])
    writer.add_block_count(meta[f"{a}.block_count"])
    writer.add_feed_forward_length(meta[f"{a}.feed_forward_length"])
    writer.add_head_count(meta[f"{a}.attention.head_count"])
    writer.add_head_count_kv(meta[f"{a}.attention.head_count_kv"])
    writer.add_key_length(meta[f"{a}.attention.key_length"])
    writer.add_value_length(meta[f"{a}.attention.value_length"])
    writer.add_rope_dimension_count(meta[f"{a}.rope.dimension_count"])
    writer.add_rope_freq_base(meta[f"{a}.rope.freq_base"])
    writer.add_layer_norm_rms_eps(meta[f"{a}.attention.layer_norm_rms_epsilon"])
    writer.add_vocab_size(meta[f"{a}.vocab_size"])
    writer.add_string(MARKER, meta[MARKER])
    writer.add_string("tlm_probe.config", meta["tlm_probe.config"])
    writer.add_string("tlm_probe.tokenizer_note", meta["tlm_probe.tokenizer_note"])


def write_gguf(model, tokenizer, out: Path, source: str) -> dict:
    """Write `model` (a TaperedLM) and its tokenizer to `out`, verified by reading back; a summary dict."""
    from gguf import GGUFWriter

    cfg = model.cfg
    shapes = check_exportable(cfg, "GGUF")
    state = model.state_dict()
    check_state_shapes(state, shapes, cfg.d_model)
    arch = "llama" if shapes.uniform else "deci"
    tensors = gguf_tensors(state, cfg, shapes)
    vocab, note = vocab_metadata(tokenizer, cfg.vocab_size)
    meta = gguf_metadata(cfg, shapes, arch, source) | {"tlm_probe.tokenizer_note": note}
    need = sum(a.nbytes for a in tensors.values()) + (1 << 20)
    with atomic_path(out, need) as tmp:
        writer = GGUFWriter(tmp, arch)
        _add_metadata(writer, meta, arch)
        if vocab is not None:
            add_vocab(writer, vocab)
        for name, a in tensors.items():
            writer.add_tensor(name, a)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        verify_gguf(tmp, tensors, meta, vocab)
    return {"out": str(out), "format": "gguf", "architecture": arch, "tensors": len(tensors),
            "bytes": out.stat().st_size, "tokenizer": note, **shapes.per_layer()}


def check_gguf_out(out: Path, overwrite: bool) -> None:
    """Before any loading: --out names a .gguf file in an existing folder that is new, or (with
    --overwrite) a regular file an earlier `tlm export` wrote."""
    if out.suffix.lower() != ".gguf":
        raise UserError(f"--out must name a .gguf file with --gguf, got {out}")
    if not out.parent.is_dir():
        raise UserError(f"parent folder of --out does not exist: {out.parent}")
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_file():  # renaming onto a link would replace the link, not its file
        raise UserError(f"refusing to replace {out}: it is not a regular file")
    if not is_exported_gguf(out):
        raise UserError(f"refusing to replace {out}: `tlm export` did not write it (move it away first)")
    if not overwrite:
        raise UserError(f"{out} already exists; pass --overwrite to replace it")


def is_exported_gguf(path: Path) -> bool:
    """A GGUF file whose metadata carries our marker (its lengths bounds-checked before reading)."""
    from gguf import GGUFReader

    from tlm_probe.capture.gguf_header import check_gguf

    try:
        check_gguf(path)
        return MARKER in GGUFReader(path).fields
    except (UserError, ValueError, OSError):
        return False


def read_gguf(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """(tensors, metadata) of a GGUF file as gguf.GGUFReader reads them (arrays as lists)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    # t.shape lists GGUF's dims (innermost first); t.data is already in PyTorch's order for float tensors
    tensors = {t.name: np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)])
               for t in reader.tensors}
    meta = {name: _field_value(f) for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    return tensors, meta


def _field_value(field):
    value = field.contents()
    return value.tolist() if isinstance(value, np.ndarray) else value


def verify_gguf(path: Path, tensors: dict[str, np.ndarray], meta: dict, vocab: dict | None) -> None:
    """The file holds exactly `tensors` (bit for bit, float32) and `meta` (and the vocabulary)."""
    got, got_meta = read_gguf(path)
    if set(got) != set(tensors):
        raise UserError(f"GGUF read-back of {path} differs: tensors {sorted(set(got) ^ set(tensors))[:3]}")
    for name, a in tensors.items():
        if got[name].dtype != np.float32 or got[name].shape != a.shape or not np.array_equal(got[name], a):
            raise UserError(f"GGUF read-back of {path} differs in tensor {name}")
    want = dict(meta)
    if vocab is not None:
        want |= {"tokenizer.ggml.tokens": vocab["tokens"], "tokenizer.ggml.merges": vocab["merges"],
                 "tokenizer.ggml.token_type": vocab["types"], "tokenizer.ggml.eos_token_id": vocab["eos"]}
    for key, value in want.items():
        if got_meta.get(key) != value:
            raise UserError(f"GGUF read-back of {path} differs in {key}: {str(got_meta.get(key))[:60]}")
