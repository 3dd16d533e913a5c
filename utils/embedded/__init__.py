"""The embedded server: an Ollama-compatible HTTP server on llama.cpp, in three parts, each importing
only the ones before it:

- store/    which models there are: the bundled catalogue, registered GGUF files, names, parameters;
- runtime/  the loaded models on llama.cpp: a worker per model (runner.py), its slots and caches,
            validator bursts, embedding contexts, keep_alive;
- http/     Ollama's API on top: routes, answers as Ollama streams them, thinking, tool calls.

server.py starts and stops it (in this process, or as a child process). It knows nothing of the
speculative engine (utils/engine/); nothing here imports it.
"""
