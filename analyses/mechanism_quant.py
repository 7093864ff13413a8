"""What quantization does to the mechanism statistic: full-precision models quantized to Q8_0, Q4_1 and
Q4_K_M (llama.cpp's type mixes, analyses/kquants.py), dequantized into a copy of the model folder, and
probed on exactly the tokens of the full-precision probe (same data, options and token count).

    python -m analyses.mechanism_quant [--reuse]   # -> results/mechanism/quantization.csv (+ .json)

--reuse takes a probe folder that already holds results.csv instead of probing again (the quantized
weights are deterministic, so it is the same probe).

Per model, type, reading and layer: the full-precision and quantized value and |Δ|; per model, type and
reading: Spearman ρ of the layer means with depth before and after.

Type mixes (llama.cpp's llama_tensor_get_type for these ftypes): Q8_0 every matrix; Q4_1 every matrix but
the output one (the tied embedding where there is no separate output), which is Q6_K; Q4_K_M see kquants.
Vectors (norms, biases) and position / token-type embeddings stay float32, as llama.cpp keeps them.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from gguf import GGMLQuantizationType as Q
from scipy import stats

from analyses import kquants
from analyses.mechanism_models import BY_NAME, MODELS, RESULTS, data_of, model_path, probe_out, run_probe

QUANTIZED = ("stories260k", "babyllama", "llama2xs", "minilm")
CORPUS = "tinystories"
STUDY = {"study-uniform": "study/uniform-s0", "study-cosine": "study/cosine_1.5_0.5-s0"}
"""Two tiny models trained here as the study trains its CPU arms (no study checkpoint was kept): d 64,
8 layers, d_ff 256 (uniform) or cosine 1.5 -> 0.5, 200 steps on builtin:pydoc with bpe:2048, seed 0."""
STUDY_DATA = ["--data", "builtin:pydoc", "--split", "val", "--seq-len", "128"]
TYPES = ("Q8_0", "Q4_1", "Q4_K_M")
READINGS = ("align_mlp_pre", "align_mlp_mid", "align_mlp_post")
KEEP = re.compile(r"position_embeddings|token_type_embeddings")
ROLES = (("output", re.compile(r"lm_head|unembed|word_embeddings|embed_tokens|^embed\.")),
         ("attn_v", re.compile(r"v_proj|attention\.self\.value|attn\.W_V")),
         ("ffn_down", re.compile(r"down_proj|layer\.\d+\.output\.dense|mlp\.W_out")))


def role_of(name: str, has_output: bool) -> str:
    for role, pattern in ROLES:
        if pattern.search(name) and (role != "output" or _is_head(name) or not has_output):
            return role
    return "other"


def _is_head(name: str) -> bool:
    return "lm_head" in name or "unembed" in name


def layer_of(name: str) -> int | None:
    m = re.search(r"\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def type_for(mix: str, role: str, layer: int | None, n_layers: int) -> Q:
    if mix == "Q4_K_M":
        return kquants.q4_k_m_type(role, layer, n_layers)
    if mix == "Q4_1" and role == "output":
        return Q.Q6_K
    return Q[mix]


def quantize_state(state: dict[str, np.ndarray], mix: str, n_layers: int) -> tuple[dict, dict]:
    """(dequantized state, {tensor: type written}) for one type mix."""
    has_output = any(_is_head(k) for k in state)
    out, types = {}, {}
    for name, w in state.items():
        if w.ndim != 2 or w.dtype.kind != "f" or KEEP.search(name):
            out[name] = w
            continue
        qtype = kquants.settle(type_for(mix, role_of(name, has_output), layer_of(name), n_layers), w.shape[1])
        out[name], types[name] = kquants.roundtrip(w, qtype), qtype.name
    return out, types


def source_of(name: str) -> tuple[Path, list[str]]:
    """(model folder, the probe's data arguments) of a quantized model."""
    if name in STUDY:
        return MODELS / STUDY[name], STUDY_DATA
    return model_path(BY_NAME[name]), data_of(BY_NAME[name], CORPUS)  # the full-precision probe's data


def write_quantized(name: str, mix: str) -> tuple[Path, dict]:
    from safetensors.numpy import load_file, save_file

    src = source_of(name)[0]
    dst = MODELS / "quant" / f"{name}-{mix}"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".tlm-manifest.json", "model.safetensors",
                                                            "*.pt", "state*", "metrics.jsonl"))
    config = json.loads((src / "config.json").read_text())
    state = load_file(str(src / "model.safetensors"))
    qstate, types = quantize_state(state, mix, config.get("num_hidden_layers") or config["n_layers"])
    save_file(qstate, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst, types


def compare(full: pd.DataFrame, quant: pd.DataFrame, model: str, mix: str, corpus: str) -> pd.DataFrame:
    rows = []
    for stat in READINGS:
        a = full[full.statistic == stat].sort_values("layer")
        b = quant[quant.statistic == stat].sort_values("layer")
        assert (a.n_tokens.to_numpy() == b.n_tokens.to_numpy()).all(), "not the same tokens"
        rho_a = stats.spearmanr(a.depth, a.value)[0]
        rho_b = stats.spearmanr(b.depth, b.value)[0]
        for (_, ra), vb in zip(a.iterrows(), b.value, strict=True):
            rows.append(dict(model=model, corpus=corpus, quant=mix, statistic=stat, layer=int(ra.layer),
                             depth=ra.depth, value_full=ra.value, value_quant=vb,
                             abs_delta=abs(vb - ra.value), ci_half_width_full=(ra.ci_high - ra.ci_low) / 2,
                             rho_full=rho_a, rho_quant=rho_b, n_tokens=int(ra.n_tokens)))
    return pd.DataFrame(rows)


def collect_study(name: str, corpus: str, src: Path) -> None:
    dst = RESULTS / "quantization_study" / name / corpus
    dst.mkdir(parents=True, exist_ok=True)
    for f in ("results.csv", "provenance.json"):
        shutil.copyfile(src / f, dst / f)


def probe(name: str, corpus: str, folder: Path, out: Path, data: list[str], reuse: bool) -> Path:
    if reuse and (out / "results.csv").is_file():
        return out
    return run_probe(name, corpus, path=folder, out=out, data=data)


def main(reuse: bool = False) -> None:
    tables, types_used = [], {}
    for name in (*QUANTIZED, *STUDY):
        folder, data = source_of(name)
        corpus = "builtin" if name in STUDY else CORPUS
        if name in STUDY:  # its full-precision reading, committed beside the real models'
            collect_study(name, corpus, probe(name, corpus, folder, probe_out(name, corpus), data, reuse))
        full = pd.read_csv(probe_out(name, corpus) / "results.csv")
        for mix in TYPES:
            qfolder, types = write_quantized(name, mix)
            types_used[f"{name}-{mix}"] = dict(sorted({t: sum(v == t for v in types.values())
                                                       for t in set(types.values())}.items()))
            out = probe(name, corpus, qfolder, MODELS / "probes" / f"{name}-{mix}", data, reuse)
            tables.append(compare(full, pd.read_csv(out / "results.csv"), name, mix, corpus))
            print(name, mix, types_used[f"{name}-{mix}"], flush=True)
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(RESULTS / "quantization.csv", index=False)
    doc = {"corpus": f"{CORPUS} (study models: builtin)", "types": types_used,
           "method": __doc__.strip().splitlines()[0]}
    (RESULTS / "quantization.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(table.groupby(["model", "quant"]).abs_delta.max().unstack().to_string())


if __name__ == "__main__":
    main(reuse="--reuse" in sys.argv[1:])
