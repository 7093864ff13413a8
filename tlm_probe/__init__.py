"""tlm_probe: probe how language models use their depth; train tapered models and fair uniform baselines.

Importing tlm_probe registers model_type "tlm" with transformers' Auto classes (tlm_probe/models/hf.py). The
registration runs as soon as transformers is imported (now, if it already is), so that commands that never
touch transformers (`tlm schedule`, `tlm --help`) do not pay for importing it.
"""

import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"


def _register_auto_classes() -> None:
    hf = sys.modules.get("tlm_probe.models.hf")
    if hf is not None and not hasattr(hf, "register"):
        return  # transformers is being imported BY models/hf.py (imported first): it registers at its end
    from tlm_probe.models.hf import register

    register()


class _RegisterAfterTransformers(importlib.abc.MetaPathFinder):
    """Runs the registration right after the `transformers` package has been executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "transformers":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register_auto_classes()

        spec.loader.exec_module = exec_then_register
        return spec


if "transformers" in sys.modules:
    _register_auto_classes()
elif not any(isinstance(f, _RegisterAfterTransformers) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterTransformers())
