"""The one error type a user can cause: a message, what to do about it, and the exit code.

The CLI prints it as ``gputop: error: MESSAGE`` and ``hint: HINT`` and exits with ``code``
(1 error, 2 bad usage, 77 missing privileges). Stdlib only.
"""

from __future__ import annotations

EX_OK, EX_ERROR, EX_USAGE, EX_NOPERM = 0, 1, 2, 77


class GputopError(Exception):
    def __init__(self, message: str, hint: str, code: int = EX_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code
