"""User-provided text on its way to names, logs and terminals: control characters.

A name or an error message with a line break can forge a log line; an escape sequence can
rewrite a terminal; a bidirectional override makes text read differently from what it is.
Names refuse these characters (:mod:`django_dsched.models.validators`); logs and command output
show them escaped (``\\n``, ``\\x1b``, ``\\u202e``).
"""

from __future__ import annotations

import re

# C0 and C1 controls (with DEL), the Unicode line and paragraph separators, and the
# bidirectional embeddings, overrides and isolates.
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def has_control_characters(text: str) -> bool:
    return CONTROL_CHARACTERS.search(text) is not None


def escape_control_characters(text: str) -> str:
    """``text`` on one line, with every control character written as an escape."""
    return CONTROL_CHARACTERS.sub(_escape, text)
