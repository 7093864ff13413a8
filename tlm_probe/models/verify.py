"""The one check of a tlm checkpoint folder before anything is built from it: config.json read and typed,
the weights file chosen (pickle refused), and the safetensors header's names and shapes compared with
what the config implies. No torch: `tlm info` runs it as fast as `tlm --help`, and `tlm probe`,
`tlm generate` and load_tlm run it before they allocate a model (models/io.py, generation.py)."""

from __future__ import annotations

from pathlib import Path

from tlm_probe.errors import UserError
from tlm_probe.models.config import TLMConfig
from tlm_probe.models.config_file import read_tlm_config
from tlm_probe.models.safetensors_header import read_safetensors_header
from tlm_probe.models.shapes import required_groups, state_shapes

WEIGHTS_FILE = "model.safetensors"
PICKLE_WEIGHTS = ("pytorch_model.bin", "model.pt", "model.pth", "model.bin")


def weights_path(folder: Path, allow_pickle: bool = False) -> Path:
    """The safetensors file of a folder; pickle-only folders are refused unless allow_pickle."""
    if (folder / WEIGHTS_FILE).is_file():
        return folder / WEIGHTS_FILE
    pickles = [folder / p for p in PICKLE_WEIGHTS if (folder / p).is_file()]
    if pickles and not allow_pickle:
        raise UserError(
            f"{folder} has only pickle weights ({pickles[0].name}); refusing to unpickle "
            "(pass --unsafe-pickle if you trust this file)"
        )
    if pickles:
        return pickles[0]
    raise UserError(f"no model.safetensors in {folder}")


def check_weights(folder: Path, cfg: TLMConfig) -> None:
    """The tensors of folder/model.safetensors are exactly the weights config.json describes (names and
    shapes; tied weights may be stored under either name). One line naming the first difference."""
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise UserError(f"no {WEIGHTS_FILE} in {folder}")
    header = read_safetensors_header(path)
    expected = state_shapes(cfg)
    for name, info in header.items():
        if name not in expected:
            raise UserError(f"{path} holds {name!r}, which a model of its config.json does not have")
        if tuple(info["shape"]) != expected[name]:
            raise UserError(
                f"{path}: {name} has shape {info['shape']}, config.json implies {list(expected[name])}"
            )
    missing = [names[0] for names in required_groups(cfg) if not any(n in header for n in names)]
    if missing:
        raise UserError(f"{path} lacks {len(missing)} weight(s) of its config.json, e.g. {missing[0]}")


def verify_checkpoint(folder: Path, allow_pickle: bool = False) -> tuple[TLMConfig, Path]:
    """(config, weights file) of a tlm checkpoint folder whose safetensors weights match its config."""
    folder = Path(folder)
    cfg = read_tlm_config(folder)
    path = weights_path(folder, allow_pickle)
    if path.suffix == ".safetensors":
        check_weights(folder, cfg)
    return cfg, path
