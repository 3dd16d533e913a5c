"""The Ollama HTTP front: request and response shapes, body limits, errors and NDJSON streaming.

Shared by any server that speaks Ollama's API (the embedded server, a future proxy); it knows
nothing about how answers are computed. Imports nothing from utils/engine or utils/embedded.
"""
