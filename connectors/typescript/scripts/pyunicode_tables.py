"""The pinned Unicode tables of the canonical session key, and the TypeScript file made from them.

    python connectors/typescript/scripts/pyunicode_tables.py          # write the TS tables
    python connectors/typescript/scripts/pyunicode_tables.py --check  # exit 1 if they are stale
    python connectors/typescript/scripts/pyunicode_tables.py --pin    # re-derive the pin (rare)

A session key is an identity: it must not change when the interpreter does. So the key's case
mapping and whitespace come from tables pinned once (transcript_connector/unicode_tables.py,
Unicode 14.0.0 as Python 3.11 has it), which transcript_connector.unicode_text and the
TypeScript port (src/pyunicode-tables.ts, written from the pinned module) both read.
`--pin` re-derives the pinned module from the running Python, through its public str methods
only: run it deliberately, knowing that every key whose spelling the new tables fold
differently moves to another session (tests/unit/test_unicode_pinned.py lists which).

Why tables and not JavaScript's own `trim()` and `toLowerCase()`: they differ from Python's
(JavaScript trims U+FEFF and keeps U+001C..U+001F and U+0085; Python the opposite), and Node's
ICU follows a newer Unicode than the pin (Node 20 lowercases 55 code points Unicode 14 leaves
alone, and disagrees on the final-sigma context of about 400).

Tables (all code points 0..0x10FFFF, surrogates included, as Python's str holds them):
- WHITESPACE: what `str.strip()` removes (`str.isspace()`).
- LOWER_RUNS / LOWER_MULTI: `str.lower()` of each single character that changes.
  `'Σ'.lower()` depends on its neighbours (Final_Sigma), decided like CPython's
  `handle_capital_sigma` with CASED and CASE_IGNORABLE below.
- CASED, CASE_IGNORABLE: Unicode's Cased and Case_Ignorable, read back from how `lower()`
  treats a capital sigma beside each character (checked against CPython's private
  `_PyUnicode_IsCased`/`_PyUnicode_IsCaseIgnorable` when ctypes can reach them).
- NON_PRINTABLE: not `str.isprintable()`, for the TypeScript `repr()` of error messages.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import unicodedata
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
TS_OUT = ROOT / "connectors" / "typescript" / "src" / "pyunicode-tables.ts"
PINNED = ROOT / "connectors" / "python" / "src" / "transcript_connector" / "unicode_tables.py"
MAX = 0x110000
TABLES = ("WHITESPACE", "LOWER_RUNS", "LOWER_MULTI", "CASED", "CASE_IGNORABLE", "NON_PRINTABLE")


# --- deriving the tables from the running Python (--pin) ----------------------------------


def _cased(c: str) -> bool:
    # a single character: Cased = Lowercase | Uppercase | Lt, which is what these three test
    return c.islower() or c.isupper() or c.istitle()


def _case_ignorable(c: str) -> bool:
    # CPython's final-sigma test: Σ is final when a cased character precedes it (skipping
    # case-ignorable ones) and none follows it (skipping case-ignorable ones).
    if _cased(c):
        return ("AΣ" + c).lower()[1] == "ς"  # skipped after Σ: Σ ends the word
    return ("A" + c + "Σ").lower()[-1] == "ς"  # skipped before Σ: the A counts


def _ranges(members: list[int]) -> list[int]:
    """[first, last, first, last, …] of the sorted code points `members`."""
    out: list[list[int]] = []
    for cp in members:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [n for pair in out for n in pair]


def _lower_runs(single: list[tuple[int, int]]) -> list[int]:
    """[start, count, stride, delta, …]: code points start + k*stride map to themselves + delta."""
    runs: list[list[int]] = []
    for cp, low in single:
        delta = low - cp
        if runs:
            start, count, stride, d = runs[-1]
            step = cp - (start + (count - 1) * stride)
            if d == delta and (step in (1, 2) if count == 1 else step == stride):
                runs[-1] = [start, count + 1, step, d]
                continue
        runs.append([cp, 1, 1, delta])
    return [n for run in runs for n in run]


def derive() -> dict[str, list]:
    """Every table, from the running interpreter."""
    chars = [chr(cp) for cp in range(MAX)]
    single: list[tuple[int, int]] = []
    multi: list[tuple[int, tuple[int, ...]]] = []
    for cp, c in enumerate(chars):
        low = c.lower()
        if low != c and len(low) == 1:
            single.append((cp, ord(low)))
        elif low != c:
            multi.append((cp, tuple(map(ord, low))))
    cased = [cp for cp, c in enumerate(chars) if _cased(c)]
    ignorable = [cp for cp, c in enumerate(chars) if _case_ignorable(c)]
    _check_against_cpython(cased, ignorable)
    return {
        "WHITESPACE": [cp for cp, c in enumerate(chars) if c.isspace()],
        "LOWER_RUNS": _lower_runs(single),
        "LOWER_MULTI": multi,
        "CASED": _ranges(cased),
        "CASE_IGNORABLE": _ranges(ignorable),
        "NON_PRINTABLE": _ranges([cp for cp, c in enumerate(chars) if not c.isprintable()]),
    }


def _check_against_cpython(cased: list[int], ignorable: list[int]) -> None:
    try:
        import ctypes

        is_cased = ctypes.pythonapi._PyUnicode_IsCased
        is_ignorable = ctypes.pythonapi._PyUnicode_IsCaseIgnorable
    except (ImportError, AttributeError):
        return
    for f in (is_cased, is_ignorable):
        f.argtypes, f.restype = [ctypes.c_uint32], ctypes.c_int
    if cased != [cp for cp in range(MAX) if is_cased(cp)]:
        raise SystemExit("derived Cased set differs from CPython's")
    if ignorable != [cp for cp in range(MAX) if is_ignorable(cp)]:
        raise SystemExit("derived Case_Ignorable set differs from CPython's")


def _packed(nums: list[str], indent: str, width: int = 99) -> str:
    """Comma-separated, as many to a line as fit in `width` columns."""
    lines: list[str] = []
    line = ""
    for n in nums:
        item = f"{n},"
        if line and len(indent) + len(line) + 1 + len(item) > width:
            lines.append(indent + line)
            line = item
        else:
            line = f"{line} {item}" if line else item
    if line:
        lines.append(indent + line)
    return "\n".join(lines)


def render_pinned(t: dict[str, list]) -> str:
    """The text of transcript_connector/unicode_tables.py for tables `t`."""
    flat = {k: _packed([str(n) for n in t[k]], "    ") for k in TABLES if k != "LOWER_MULTI"}
    multi = "\n".join(f"    ({cp}, ({', '.join(map(str, m))}))," for cp, m in t["LOWER_MULTI"])
    py, uv = sys.version.split()[0], unicodedata.unidata_version
    return f'''\
"""Pinned Unicode data of the canonical session key: Unicode {uv}, from Python {py}.

Generated by connectors/typescript/scripts/pyunicode_tables.py --pin: do not edit. A key must
not change when the interpreter's Unicode database does, so unicode_text reads these tables,
not the running str.lower()/str.strip(); the TypeScript port's src/pyunicode-tables.ts is
written from this file. tests/unit/test_unicode_pinned.py compares them with the interpreter.
"""

UNICODE_VERSION = "{uv}"
PINNED_FROM = "Python {py}"

# Code points str.strip() removes (str.isspace()).
WHITESPACE: tuple[int, ...] = (
{flat["WHITESPACE"]}
)

# str.lower() of single characters: (start, count, stride, delta) runs, flattened.
LOWER_RUNS: tuple[int, ...] = (
{flat["LOWER_RUNS"]}
)

# str.lower() of single characters that lower to several: (code point, lowercase code points).
LOWER_MULTI: tuple[tuple[int, tuple[int, ...]], ...] = (
{multi}
)

# Cased (Lowercase | Uppercase | Lt): (first, last) ranges, flattened.
CASED: tuple[int, ...] = (
{flat["CASED"]}
)

# Case_Ignorable: (first, last) ranges, flattened.
CASE_IGNORABLE: tuple[int, ...] = (
{flat["CASE_IGNORABLE"]}
)

# Not str.isprintable() (escaped by repr()): (first, last) ranges, flattened.
NON_PRINTABLE: tuple[int, ...] = (
{flat["NON_PRINTABLE"]}
)
'''


# --- the TypeScript file, from the pinned module ------------------------------------------


def load_pinned() -> ModuleType:
    """transcript_connector/unicode_tables.py, loaded from its file (no package import)."""
    spec = importlib.util.spec_from_file_location("pinned_unicode_tables", PINNED)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flat(nums: tuple[int, ...], per_line: int) -> str:
    lines = [", ".join(map(str, nums[i : i + per_line])) for i in range(0, len(nums), per_line)]
    return "\n".join(f"  {line}," for line in lines)


def render_ts(p: ModuleType) -> str:
    multi = ",\n".join(f"  [{cp}, [{', '.join(map(str, m))}]]" for cp, m in p.LOWER_MULTI)
    return f"""\
// Generated by scripts/pyunicode_tables.py from transcript_connector/unicode_tables.py
// (Unicode {p.UNICODE_VERSION}, pinned from {p.PINNED_FROM}). Do not edit: run `make vectors`
// (or the script) and commit. tests/unit/test_vectors.py checks it is current.

/** The Unicode version of the pinned tables (transcript_connector/unicode_tables.py). */
export const PY_UNICODE_VERSION = "{p.UNICODE_VERSION}";

/** Code points `str.strip()` removes (`str.isspace()`). */
export const WHITESPACE: readonly number[] = [
{_flat(p.WHITESPACE, 12)}
];

/** `str.lower()` of single characters: [start, count, stride, delta] runs. */
export const LOWER_RUNS: readonly number[] = [
{_flat(p.LOWER_RUNS, 16)}
];

/** `str.lower()` of single characters that lower to several. */
export const LOWER_MULTI: readonly (readonly [number, readonly number[]])[] = [
{multi},
];

/** Cased (Lowercase | Uppercase | Lt): [first, last] ranges. */
export const CASED: readonly number[] = [
{_flat(p.CASED, 16)}
];

/** Case_Ignorable: [first, last] ranges. */
export const CASE_IGNORABLE: readonly number[] = [
{_flat(p.CASE_IGNORABLE, 16)}
];

/** Not `str.isprintable()` (escaped by `repr()`): [first, last] ranges. */
export const NON_PRINTABLE: readonly number[] = [
{_flat(p.NON_PRINTABLE, 16)}
];
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if the TypeScript file is stale")
    mode.add_argument("--pin", action="store_true",
                      help="re-derive the pinned module from this interpreter (changes keys)")
    args = parser.parse_args(argv)
    if args.pin:
        PINNED.write_text(render_pinned(derive()), "utf-8")
        print(f"{PINNED}: pinned Unicode {unicodedata.unidata_version} from Python "
              f"{sys.version.split()[0]}; now run this script without --pin")
        return 0
    text = render_ts(load_pinned())
    if args.check:
        if not TS_OUT.is_file() or TS_OUT.read_text("utf-8") != text:
            print(f"stale: {TS_OUT} (run `make vectors`)", file=sys.stderr)
            return 1
        return 0
    TS_OUT.write_text(text, "utf-8")
    print(TS_OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
