"""The file that says which tokenizer a tlm run was trained with: tokenizer.py writes and reads it,
models/hf_tokenizer.py reads it to load a byte tokenizer through AutoTokenizer. A module of its own:
models/ sits below tokenizer.py, and importing this loads nothing."""

TOKENIZER_META = "tlm_tokenizer.json"
