"""The embedded server's Ollama-compatible HTTP front: the app and its routes (api.py) over the state
they share (state.py), a chat's prompt from its template (chat_prompt.py), one answer as Ollama
streams or returns it (answer.py), the validator's burst endpoint (burst_api.py), model
management (management.py), embeddings (embeddings.py), and what a request's text becomes: thinking
(thinking.py), tool calls (tools.py), whole characters and stop strings (text.py), capabilities and
refusals (capabilities.py). Shared Ollama request and response handling is utils/api."""
