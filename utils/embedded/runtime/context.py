"""Moved: the token-level cuts are runtime/truncation.py, a chat's fitting http/chat_prompt.py.

Kept only for runner.py's import of `fit_groups` until that import names truncation.py; then this
file goes.
"""

from utils.embedded.runtime.truncation import fit_groups

__all__ = ["fit_groups"]
