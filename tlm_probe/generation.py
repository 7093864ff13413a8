"""Text generation from any checkpoint tlm loads (ours, Hugging Face folders, GGUF files) through
transformers' GenerationMixin: greedy (temperature 0) or sampled with temperature and top-p, seeded.
Our models decode with a KV cache (tlm_probe/models/hf.py): each step runs only the new token."""

from __future__ import annotations

import warnings
from dataclasses import InitVar, dataclass, replace
from pathlib import Path

from tlm_probe.capture.dispatch import check_dispatch_options
from tlm_probe.capture.option_fields import Dtype, shared
from tlm_probe.errors import UserError
from tlm_probe.models.config_file import CONFIG, read_config_json
from tlm_probe.ranges import check_values
from tlm_probe.seeds import check_seed

# torch, transformers and the loaders are imported where they are used: the CLI builds `tlm generate`'s
# options from GenerateOptions at start-up, which must stay light


MAX_NEW_TOKENS = 1_000_000
"""--max-new-tokens above this is refused: far past any model's context, it would only slide for hours."""


@dataclass(frozen=True, kw_only=True)
class GenerateOptions:
    """How `tlm generate` decodes. Its options are generated from these fields (commands/options.py): one
    default and one help for the library and the CLI. Checked when made (one UserError line each)."""

    max_new_tokens: int = 64
    """Tokens to generate at most."""
    temperature: float = 0.0
    """0: greedy; above 0: sample at this temperature."""
    top_p: float = 1.0
    """Nucleus sampling threshold (with --temperature > 0)."""
    seed: int = 0
    """Seed of the sampler."""
    cache: bool = True
    """Decode with a KV cache (--no-cache: recompute every step)."""
    device: str = shared("device")
    dtype: Dtype = shared("dtype")
    device_map: str = shared("device_map")
    max_memory: str = shared("max_memory")
    use_cache: InitVar[bool | None] = None
    """Old name of cache (deprecated)."""

    def __post_init__(self, use_cache):
        if use_cache is not None:
            if not self.cache and use_cache:
                raise TypeError("GenerateOptions() got use_cache= and cache=; use_cache is the old name of "
                                "cache")
            warnings.warn("GenerateOptions(use_cache=...) is deprecated; use cache= (as the CLI's --cache/"
                          "--no-cache)", DeprecationWarning, stacklevel=3)
            object.__setattr__(self, "cache", use_cache)
        self.check()

    def check(self) -> None:
        check_values(self)  # max_new_tokens, temperature (nan and inf too): their ranges
        if not 0 < self.top_p <= 1:  # nan fails this too
            raise UserError(f"--top-p must be in (0, 1], got {self.top_p}")
        check_seed(self.seed, "--seed")
        check_dispatch_options(self.device_map, self.max_memory)


NEEDS_TOKENIZER = ("tlm generate", "to turn the prompt into ids and the ids back into text")


def load_generator(source: str, opts: GenerateOptions):
    """(model with .generate, TextCodec, context length)."""
    from tlm_probe.capture.loading import load_probe_model
    from tlm_probe.eval.scorer import TextCodec, model_max_length
    from tlm_probe.progress import Phase

    folder = Path(source)
    if not opts.device_map and folder.is_dir() and (folder / CONFIG).is_file():  # dispatched: the loader's
        if read_config_json(folder).get("model_type") == "tlm":  # TLMForCausalLM (capture/loading.py)
            with Phase(f"loading {source}") as phase:  # a slow load says so (load_probe_model does too)
                loaded = _load_tlm(folder, opts)
                phase.result = f"loaded {source} (tlm, {loaded[0].config.n_layers} layers)"
            return loaded
    pm = load_probe_model(source, opts.device, opts.dtype, device_map=opts.device_map,
                          max_memory=opts.max_memory)
    if not pm.is_causal or not hasattr(pm.model, "generate"):
        raise UserError(f"{source} is not a causal language model; it cannot generate text")
    return pm.model, TextCodec(pm.tokenizer, *NEEDS_TOKENIZER), model_max_length(pm)


def _load_tlm(folder: Path, opts: GenerateOptions):
    from transformers.utils import logging as hf_logging

    from tlm_probe.capture.loading import DTYPES, check_device, load_tokenizer
    from tlm_probe.eval.scorer import TextCodec
    from tlm_probe.models.hf import TLMForCausalLM
    from tlm_probe.models.verify import verify_checkpoint

    check_device(opts.device)
    verify_checkpoint(folder)  # the checks every loader makes, before transformers allocates the model
    hf_logging.disable_progress_bar()
    model = TLMForCausalLM.from_pretrained(str(folder), dtype=DTYPES[opts.dtype]).to(opts.device).eval()
    return model, TextCodec(load_tokenizer(folder), *NEEDS_TOKENIZER), model.cfg.max_seq_len


def generate_ids(model, prompt_ids: list[int], opts: GenerateOptions, eos_id: int, context: int) -> list[int]:
    """The new ids. The model sees at most its last `context` tokens: while prompt + new ids fit, one
    (KV-cached) generate() call; after that the window slides one token per step, each step a fresh
    forward over the last `context` ids (positions restart at the window, so a cache cannot be kept)."""
    import torch

    window = (prompt_ids or [eos_id])[-context:]
    fits = min(opts.max_new_tokens, context - len(window) + 1)  # the last fitting step sees `context` ids
    with torch.no_grad():
        torch.manual_seed(opts.seed)  # once: the sliding steps continue the same random stream
        new = _generate(model, window, fits, opts, eos_id)
        while len(new) < opts.max_new_tokens and (not new or new[-1] != eos_id):
            new += _generate(model, (window + new)[-context:], 1, opts, eos_id)
    return new


def _generate(model, ids: list[int], n: int, opts: GenerateOptions, eos_id: int) -> list[int]:
    import torch

    from tlm_probe.capture.dispatch import input_device

    x = torch.tensor([ids], device=input_device(model))  # a dispatched model: where its first block is
    sample = opts.temperature > 0
    out = model.generate(
        x,
        attention_mask=torch.ones_like(x),
        max_new_tokens=n,
        do_sample=sample,
        temperature=opts.temperature if sample else None,
        top_p=opts.top_p if sample else None,
        top_k=0 if sample else None,  # top-p alone: no default top-50 cut
        use_cache=opts.cache,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    return out[0, len(ids) :].tolist()


def window_note(prompt_tokens: int, new_tokens: int, context: int) -> str | None:
    """What the model did not see, in numbers (None when everything fit in its context)."""
    if prompt_tokens + new_tokens - 1 <= context:  # the last new id is predicted, never fed back
        return None
    cut = max(prompt_tokens - context, 0)
    seen = f"the first {cut} prompt tokens were not seen; " if cut else ""
    return (f"note: prompt ({prompt_tokens} tokens) + {new_tokens} new tokens exceed the model's context of "
            f"{context}: {seen}the window slid, each token predicted from the last {context} tokens")


def generate_text(source: str, prompt: str, opts: GenerateOptions) -> dict:
    """Continue `prompt`: {prompt, completion, new_tokens, ids, context, window_note}. Device auto is
    resolved here (a GPU when there is one)."""
    from tlm_probe.models.device import resolve_device_name

    opts.check()
    opts = replace(opts, device=resolve_device_name(opts.device))
    model, codec, context = load_generator(source, opts)
    ids = codec.encode(prompt)
    vocab = model.get_input_embeddings().num_embeddings
    top = max([*ids, codec.eos_id])
    if top >= vocab:  # a tokenizer that does not belong to the model: an IndexError in the embedding
        raise UserError(f"{source}: its tokenizer gives token id {top}, outside the model's vocabulary of "
                        f"{vocab}; the tokenizer does not match the model")
    new = generate_ids(model, ids, opts, codec.eos_id, context)
    note = window_note(max(len(ids), 1), len(new), context)
    return {"prompt": prompt, "completion": codec.decode(new), "new_tokens": len(new), "ids": new,
            "context": context, "window_note": note}
