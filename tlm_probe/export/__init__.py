"""Our checkpoints -> stock formats: GGUF (llama.cpp; gguf_writer.py) and a Hugging Face LlamaForCausalLM
folder (hf_llama.py). Each output is verified by reading it back before it is renamed into place, and a
model the target cannot represent is refused with one line (support.py) rather than written wrong."""
