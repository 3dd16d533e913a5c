"""A drop-in speculative Ollama proxy: clients change one URL and get speculation where it applies.

Requests the engine can answer exactly (generate and chat for a target with a paired drafter, no
feature the validator cannot keep exact) are speculated; everything else is forwarded to the
upstream Ollama unchanged, bytes and status as upstream sends them. Imports the engine and the
shared HTTP front (utils/api), never the embedded server.
"""
