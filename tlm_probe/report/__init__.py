"""The HTML + Markdown report, above plotting: `sections` decides what goes in, `html` renders and
writes it."""
