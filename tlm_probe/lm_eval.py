"""`python -m tlm_probe.lm_eval ARGS`: lm-evaluation-harness's own command line (what `lm_eval ARGS` runs),
with model_type "tlm" registered with transformers first, so the harness's `--model hf --model_args
pretrained=RUN` loads a tlm run folder like any Hugging Face checkpoint.

Plain `lm_eval --model hf --model_args pretrained=RUN` cannot: it runs in a fresh interpreter where
transformers has never heard of model_type "tlm" (nothing of ours is imported there), and it ends in
transformers' "does not recognize this architecture". `tlm eval RUN --tasks ...` is the other way.
"""

from __future__ import annotations

import sys

from tlm_probe import register_with_transformers


def main(argv: list[str] | None = None) -> None:
    register_with_transformers()
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *(sys.argv[1:] if argv is None else argv)]
    cli_evaluate()


if __name__ == "__main__":
    main()
