"""`str.strip()` and `str.lower()` as of the pinned Unicode version, on any interpreter.

A session key is an identity, so its spelling must not move when the interpreter's Unicode
database does (Python 3.12 has Unicode 15.0, 3.13 has 15.1): `py_strip` and `py_lower` give
what Python 3.11 (Unicode 14.0.0) gives, from the pinned tables of unicode_tables, which the
TypeScript port reads too (src/pyunicode-tables.ts). Pure-ASCII text takes the interpreter's
own methods: ASCII case and whitespace are the same in every Unicode version, and fast.
"""

from __future__ import annotations

from bisect import bisect_right

from transcript_connector.unicode_tables import (
    CASE_IGNORABLE,
    CASED,
    LOWER_MULTI,
    LOWER_RUNS,
    UNICODE_VERSION,
    WHITESPACE,
)

_WHITESPACE = "".join(map(chr, WHITESPACE))
_SIGMA = "\u03a3"


def _lower_table() -> dict[int, str]:
    table = {
        start + k * stride: chr(start + k * stride + delta)
        for start, count, stride, delta in zip(*[iter(LOWER_RUNS)] * 4, strict=True)
        for k in range(count)
    }
    table.update((cp, "".join(map(chr, low))) for cp, low in LOWER_MULTI)
    return table


_LOWER = _lower_table()


class _Ranges:
    """Membership in sorted, disjoint [first, last] ranges (given flattened)."""

    def __init__(self, flat: tuple[int, ...]) -> None:
        self._firsts, self._lasts = flat[0::2], flat[1::2]

    def __contains__(self, cp: int) -> bool:
        i = bisect_right(self._firsts, cp) - 1
        return i >= 0 and cp <= self._lasts[i]


_CASED = _Ranges(CASED)
_CASE_IGNORABLE = _Ranges(CASE_IGNORABLE)


def py_strip(s: str) -> str:
    """`s.strip()` with the pinned whitespace (what `str.isspace()` was in Unicode 14.0.0)."""
    return s.strip() if s.isascii() else s.strip(_WHITESPACE)


def py_lower(s: str) -> str:
    """`s.lower()` with the pinned full lowercase mapping (İ -> i̇) and CPython's Final_Sigma."""
    if s.isascii():
        return s.lower()
    if _SIGMA not in s:
        return s.translate(_LOWER)
    out: list[str] = []
    start = 0
    while (i := s.find(_SIGMA, start)) >= 0:
        out += s[start:i].translate(_LOWER), "\u03c2" if _final_sigma(s, i) else "\u03c3"
        start = i + 1
    out.append(s[start:].translate(_LOWER))
    return "".join(out)


def _final_sigma(s: str, i: int) -> bool:
    """CPython's handle_capital_sigma: a cased letter before the Σ at `i`, none after it (each
    side skipping case-ignorable characters)."""
    j = i - 1
    while j >= 0 and ord(s[j]) in _CASE_IGNORABLE:
        j -= 1
    if j < 0 or ord(s[j]) not in _CASED:
        return False
    j = i + 1
    while j < len(s) and ord(s[j]) in _CASE_IGNORABLE:
        j += 1
    return j == len(s) or ord(s[j]) not in _CASED


__all__ = ["UNICODE_VERSION", "py_lower", "py_strip"]
