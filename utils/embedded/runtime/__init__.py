"""The embedded server's models on llama.cpp: one worker thread per loaded model (runner.py) with its
KV-cache slots (slots.py, cache.py), the jobs it runs (jobs.py), validator bursts gathered into one
evaluation (bursts.py), prompts cut to fit the context (truncation.py), `format` grammars (grammar.py),
embedding contexts (embedder.py), and which models are loaded and for how long (loaded.py,
residency.py). Nothing here knows HTTP routes.

This file imports nothing: runner.py must load llama.cpp's libraries before numpy's."""
