"""tlm eval: lm-evaluation-harness bridge (harness), built-in offline tasks (builtin_tasks), perplexity,
the scorer they share, and the orchestration (run)."""
