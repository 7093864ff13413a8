"""What a tlm checkpoint folder carries for transformers' Auto classes: `architectures` and `auto_map` in
config.json and a small code file, modeling_tlm.py, so that

    AutoModelForCausalLM.from_pretrained(RUN, trust_remote_code=True)

loads it in any process, whether or not tlm_probe was imported, before or after transformers. This is
transformers' own mechanism for model code that lives outside the library ("custom models": auto_map names
the classes, trust_remote_code is the user's consent to run the folder's code); without consent transformers
says to pass trust_remote_code=True, not to upgrade. The code file holds no model code: it subclasses
tlm_probe's classes (models/hf.py), so tlm_probe must be installed and the weights mean the same as for
load_tlm.

When tlm_probe registered model_type "tlm" in the process (`import tlm_probe` after transformers, a tlm
loader, or tlm_probe.register_with_transformers()), transformers uses those classes and runs no folder code.

Folders written before these keys existed load as before through tlm_probe; their config.json is not
rewritten. Torch-free: save_tlm writes these, and nothing here imports a model.
"""

from __future__ import annotations

from pathlib import Path

from tlm_probe.files.fileio import atomic_write_text

CODE_FILE = "modeling_tlm.py"
ARCHITECTURES = ["TLMForCausalLM"]
AUTO_MAP = {
    "AutoConfig": "modeling_tlm.TLMHFConfig",
    "AutoModelForCausalLM": "modeling_tlm.TLMForCausalLM",
}

# subclasses, not re-exports: transformers marks a remote class for save_pretrained (register_for_auto_class);
# on a subclass that mark stays off tlm_probe's own classes, and a save copies this file, not tlm_probe's
CODE = '''"""Written by tlm_probe: lets transformers load this tlm checkpoint folder with
AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True). The model code is tlm_probe's
(pip install tlm_probe; tlm_probe/models/hf.py); this file only names it."""

from tlm_probe.models import hf


class TLMHFConfig(hf.TLMHFConfig):
    def __init__(self, **kwargs):  # stated: transformers replaces the __init__ of a config that has none
        super().__init__(**kwargs)


class TLMForCausalLM(hf.TLMForCausalLM):
    config_class = TLMHFConfig
'''


def hf_keys() -> dict:
    """The config.json keys that point transformers' Auto classes at CODE_FILE."""
    return {"architectures": list(ARCHITECTURES), "auto_map": dict(AUTO_MAP)}


def write_code_file(folder: Path) -> Path:
    """Write CODE_FILE into a checkpoint folder (atomically)."""
    return atomic_write_text(Path(folder) / CODE_FILE, CODE)
