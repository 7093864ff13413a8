"""tlm_probe: probe how language models use their depth; train tapered models and fair uniform baselines.

`register_with_transformers()` makes transformers' Auto classes load tlm checkpoint folders (model_type
"tlm"); tlm's own loaders call it. It is a function, not an import side effect, so that `import tlm_probe`
never touches transformers (commands such as `tlm schedule` and `tlm --help` stay fast) and so that no
module import order can form a circle through it.
"""

import time

__version__ = "0.1.0"
STARTED = time.perf_counter()
"""When tlm_probe was first imported: in the `tlm` command, its start (tlm_probe/cli.py's import),
so that the durations a command prints count its start-up (progress.since_start)."""


def register_with_transformers() -> None:
    """Register model_type "tlm" with AutoConfig, AutoModelForCausalLM and AutoTokenizer (idempotent)."""
    from tlm_probe.models.hf import register

    register()
