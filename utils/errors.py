"""The one error type every part of the project raises for a failure a person should read about.

`message` is a sentence for people (a server's own message where there is one); `status` the HTTP
status it maps to, where it has one. Callers catch `SpecError` and branch on its subclasses, never
on the message's text.
"""

from __future__ import annotations


class SpecError(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.message, self.status = message, status
