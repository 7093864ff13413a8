"""tlm_probe: probe how language models use their depth; train tapered models and fair uniform baselines."""

from tlm_probe.models.hf import register as _register_auto_classes

__version__ = "0.1.0"

# AutoConfig / AutoModelForCausalLM learn model_type "tlm" (see tlm_probe/models/hf.py)
_register_auto_classes()
