"""Other programs' checkpoints into Hugging Face folders that tlm reads (llama2.c)."""
