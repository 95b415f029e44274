"""The root of every exception this project raises on purpose.

One root, so a shell can tell a reason it gave (exit 2, `error: <reason>`: the reason names
the file, variable or record, never a traceback) from a bug (`error: <class>: <message>`),
and a caller can catch the project's failures without catching Python's.
"""

from __future__ import annotations


class OwnerError(Exception):
    """A failure the project names: its message is the whole reason, fit for a user."""


__all__ = ["OwnerError"]
