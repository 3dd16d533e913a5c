"""Which models the embedded server can serve, and where their files are: the bundled catalogue
(models.py, models.json), models registered by name (registry.py, library.py), Ollama's model names
(names.py) and Modelfile parameters (parameters.py). No llama.cpp here."""
