"""tlm_probe: probe how language models use their depth; train tapered models and fair uniform baselines.

    import tlm_probe as tp
    h = tp.load("HuggingFaceTB/SmolLM2-135M")          # any supported family, or a loaded nn.Module
    cache = h.run_with_cache("Hello world", names=["mlp_out"], layers=[3])
    df = tp.probe(h, "builtin:pydoc", max_tokens=20_000)

The public names (PUBLIC) are lazy attributes (PEP 562): `import tlm_probe` imports no torch, and a name
imports its module on first use. tp.load, tp.probe, tp.plot, tp.diff, tp.schedule, tp.train and tp.compare
are the library side of their commands (tlm_probe/api/library.py; tp.probe, tp.diff and tp.train are the
packages of those names, made callable: tlm_probe/public_call.py); tp.zero, tp.mean, tp.patch, tp.add,
tp.apply make the edits of Handle.hooks (tlm_probe/capture/edits.py).

`register_with_transformers()` makes transformers' Auto classes load tlm checkpoint folders (model_type
"tlm"); tlm's own loaders call it, and `import tlm_probe` calls it when transformers is already imported
(a script that imports transformers is about to load models: registering costs it torch and transformers'
model code, which a from_pretrained imports anyway). `import tlm_probe` never imports transformers itself:
commands such as `tlm schedule` and `tlm --help` stay fast. With tlm_probe imported first and no tlm loader
called, transformers does not know model_type "tlm" (without an import hook, which tlm_probe does not
install, nothing can tell it); a folder that save_tlm wrote then loads with `trust_remote_code=True`
(the auto_map it carries: models/remote_code.py), and without it transformers says to pass that.
"""

import sys
import time
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
STARTED = time.perf_counter()
"""When tlm_probe was first imported: in the `tlm` command, its start (tlm_probe/cli.py's import),
so that the durations a command prints count its start-up (progress.since_start)."""


def register_with_transformers() -> None:
    """Register model_type "tlm" with AutoConfig, AutoModelForCausalLM and AutoTokenizer (idempotent)."""
    from tlm_probe.models.hf import register_auto_classes

    register_auto_classes()


PUBLIC = {
    **dict.fromkeys(("load", "plot", "schedule", "compare"), "tlm_probe.api.library"),
    **{name: f"tlm_probe.{name}" for name in ("probe", "diff", "train")},  # callable packages: public_call.py
    **dict.fromkeys(("zero", "mean", "patch", "add", "apply", "Edit"), "tlm_probe.capture.edits"),
    "Handle": "tlm_probe.api.handle",
    "Cache": "tlm_probe.capture.cache",
    "ProbeOptions": "tlm_probe.probe.options",
    "UserError": "tlm_probe.errors",
}
"""name -> the module that defines it. Named by string and imported on first use: a static import here
would load torch with the package, and every module that imports tlm_probe for register_with_transformers
would depend on the whole API above it (the layers contract in pyproject.toml checks the API's own
imports: tlm_probe.api is the top layer)."""


__all__ = ["load", "plot", "schedule", "compare", "probe", "diff", "train", "zero", "mean", "patch", "add",
           "apply", "Edit", "Handle", "Cache", "ProbeOptions", "UserError", "register_with_transformers"]
"""`from tlm_probe import *` gives the public names (and imports their modules: torch with most). Spelled out,
not built from PUBLIC, because type checkers read only a literal list (a test checks the two agree)."""

# Editors, IPython's completer (jedi) and type checkers run no __getattr__: they are shown the same names here
# (`X as X`: re-exported, PEP 484; tlm_probe ships py.typed). The callable packages (public_call.py) are shown
# as the library calls they make. tests/test_public_api.py checks that these are PUBLIC's names and objects.
if TYPE_CHECKING:
    from tlm_probe.api.handle import Handle as Handle
    from tlm_probe.api.library import compare as compare
    from tlm_probe.api.library import diff as diff
    from tlm_probe.api.library import load as load
    from tlm_probe.api.library import plot as plot
    from tlm_probe.api.library import probe as probe
    from tlm_probe.api.library import schedule as schedule
    from tlm_probe.api.library import train as train
    from tlm_probe.capture.cache import Cache as Cache
    from tlm_probe.capture.edits import Edit as Edit
    from tlm_probe.capture.edits import add as add
    from tlm_probe.capture.edits import apply as apply
    from tlm_probe.capture.edits import mean as mean
    from tlm_probe.capture.edits import patch as patch
    from tlm_probe.capture.edits import zero as zero
    from tlm_probe.errors import UserError as UserError
    from tlm_probe.probe.options import ProbeOptions as ProbeOptions


def __getattr__(name: str) -> Any:
    if name in PUBLIC:
        from importlib import import_module  # here: importlib's package is not loaded at start-up

        module = import_module(PUBLIC[name])
        value = module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
        globals()[name] = value  # found once
        return value
    raise AttributeError(f"module 'tlm_probe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC})


if "transformers" in sys.modules:  # last: registering imports tlm_probe.models, which needs the names above
    register_with_transformers()
