"""The pinned Unicode tables (transcript_connector/unicode_tables.py) and the running Python.

Session keys fold case and trim whitespace with the pinned tables (transcript_connector.
unicode_text), so a key never changes with the interpreter. These tests say whether the running
interpreter's own str.lower()/str.strip() would have spelled some key differently, which code
points, and what that means; and that on the pin's source (Unicode 14.0.0, Python 3.11) the
pinned functions and tables are exactly Python's, on every code point.
"""

from __future__ import annotations

import importlib.util
import sys
import unicodedata
from pathlib import Path

import pytest
from transcript_connector import unicode_tables
from transcript_connector.unicode_text import py_lower, py_strip

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "connectors/typescript/scripts/pyunicode_tables.py"
SIGMA = "\u03a3"
# Each context a code point c meets in a key, with how the key folds it.
CONTEXTS = {
    "lower": lambda c: c,
    "final sigma before c": lambda c: f"A{SIGMA}{c}",  # does c end the word after Σ?
    "final sigma after c": lambda c: f"A{c}{SIGMA}",  # is c skipped (case-ignorable) before Σ?
}
ON_THE_PIN = unicodedata.unidata_version == unicode_tables.UNICODE_VERSION


def _differences() -> dict[str, list[int]]:
    """Code points where the interpreter's lower()/strip() differ from the pinned ones."""
    chars = [chr(cp) for cp in range(0x110000)]  # surrogates included, as str holds them
    out = {
        name: [cp for cp, c in enumerate(chars) if (s := make(c)).lower() != py_lower(s)]
        for name, make in CONTEXTS.items()
    }
    out["strip"] = [cp for cp, c in enumerate(chars)
                    if (s := f"{c}x{c}").strip() != py_strip(s)]
    return {name: cps for name, cps in out.items() if cps}


def _report(diffs: dict[str, list[int]]) -> str:
    listed = "; ".join(
        f"{name}: {len(cps)} ({', '.join(f'U+{cp:04X}' for cp in cps[:12])}"
        f"{', …' if len(cps) > 12 else ''})"
        for name, cps in diffs.items()
    )
    return (
        f"Python {sys.version.split()[0]} (Unicode {unicodedata.unidata_version}) folds case or "
        f"whitespace differently from the pinned tables (Unicode {unicode_tables.UNICODE_VERSION}"
        f", {unicode_tables.PINNED_FROM}) at these code points — {listed}. Keys built by "
        "transcript_connector and the worker do not change: they use the pinned tables, so an "
        "operator has nothing to do for them. A gateway that canonicalises keys with this "
        "interpreter's own str.lower()/str.strip() would spell keys holding these characters "
        "differently (one chat, two sessions): it must call canonical_session_key / "
        "session_key_for_route instead. Re-pinning (pyunicode_tables.py --pin) would move the "
        "existing sessions of such keys: do it only deliberately."
    )


def test_the_running_pythons_case_and_whitespace_would_not_change_a_key() -> None:
    diffs = _differences()
    assert not diffs, _report(diffs)


def test_the_report_names_the_code_points_the_versions_and_what_to_do() -> None:
    text = _report({"lower": [0xA7C0, 0x1E030], "strip": [0x180E]})
    assert "lower: 2 (U+A7C0, U+1E030)" in text and "strip: 1 (U+180E)" in text
    assert f"Unicode {unicode_tables.UNICODE_VERSION}" in text and "nothing to do" in text


@pytest.mark.parametrize(
    ("text", "lowered"),
    [
        ("ΟΔΟΣ", "οδος"),  # final
        ("ΟΔΟΣ ΣΑ", "οδος σα"),  # final, then not (nothing cased before)
        ("ΑΣΑ", "ασα"),  # inside a word
        ("Σ", "σ"),  # nothing cased before
        ("Α\u0345Σ", "α\u0345ς"),  # U+0345 is case-ignorable and cased: skipped before
        ("ΑΣ\u0345Β", "ασ\u0345β"),  # skipped after: Β follows
        ("İX", "i\u0307x"),  # one to several
        ("\u212aÖ\U00010400", "kö\U00010428"),  # Kelvin sign, non-BMP
        ("\ud800Σ", "\ud800σ"),  # a lone surrogate is one (uncased) code point
    ],
)
def test_py_lower_follows_cpython(text: str, lowered: str) -> None:
    assert py_lower(text) == lowered


def test_py_strip_removes_pythons_whitespace_only() -> None:
    assert py_strip("\x1c\x85\u3000é\u2028") == "é"
    assert py_strip("\ufeffé\u200b") == "\ufeffé\u200b"  # BOM, zero-width space: not spaces


@pytest.mark.skipif(not ON_THE_PIN, reason="the pin's source is Unicode "
                    f"{unicode_tables.UNICODE_VERSION}; this is {unicodedata.unidata_version}")
def test_on_the_pins_source_re_pinning_changes_nothing() -> None:
    """Every table, NON_PRINTABLE included, is what this interpreter derives (the script checks
    Cased and Case_Ignorable against CPython's own functions where ctypes reaches them)."""
    spec = importlib.util.spec_from_file_location("unicode_tables_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    derived = script.derive()
    for name in script.TABLES:
        assert getattr(unicode_tables, name) == tuple(derived[name]), name
