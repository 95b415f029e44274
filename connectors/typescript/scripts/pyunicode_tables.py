"""Write src/pyunicode-tables.ts: the character data Python's str methods use, for the TypeScript
canonicaliser to behave exactly as transcript_connector/session_keys.py does.

    python connectors/typescript/scripts/pyunicode_tables.py          # rewrite the file
    python connectors/typescript/scripts/pyunicode_tables.py --check  # exit 1 if it is stale

Why tables and not JavaScript's own `trim()` and `toLowerCase()`: they differ from Python's
`str.strip()` and `str.lower()` (JavaScript trims U+FEFF and keeps U+001C..U+001F and U+0085;
Python the opposite), and Node's ICU follows a newer Unicode version than Python's
`unicodedata` (Node 20's ICU 78 lowercases 55 code points Python 3.11 leaves alone, and
disagrees on the final-sigma context of about 400). The session key is the Python side's:
this script reads every table from the running Python, through its public str methods only.

Tables (all code points 0..0x10FFFF, surrogates included, as Python's str holds them):
- WHITESPACE: what `str.strip()` removes (`str.isspace()`).
- LOWER_RUNS / LOWER_MULTI: `str.lower()` of each single character that changes.
  `'Σ'.lower()` depends on its neighbours (Final_Sigma); the TS code handles it like CPython's
  `handle_capital_sigma`, with CASED and CASE_IGNORABLE below.
- CASED, CASE_IGNORABLE: Unicode's Cased and Case_Ignorable as Python's database has them,
  read back from how `lower()` treats a capital sigma beside each character. (Checked here
  against CPython's private `_PyUnicode_IsCased`/`_PyUnicode_IsCaseIgnorable` when ctypes
  can reach them.)
- NON_PRINTABLE: not `str.isprintable()`, for `repr()` in error messages.
"""

from __future__ import annotations

import argparse
import sys
import unicodedata
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "pyunicode-tables.ts"
MAX = 0x110000
SIGMA = 0x3A3


def _cased(c: str) -> bool:
    # a single character: Cased = Lowercase | Uppercase | Lt, which is what these three test
    return c.islower() or c.isupper() or c.istitle()


def _case_ignorable(c: str) -> bool:
    # CPython's final-sigma test: Σ is final when a cased character precedes it (skipping
    # case-ignorable ones) and none follows it (skipping case-ignorable ones).
    if _cased(c):
        return ("AΣ" + c).lower()[1] == "ς"  # skipped after Σ: Σ ends the word
    return ("A" + c + "Σ").lower()[-1] == "ς"  # skipped before Σ: the A counts


def _ranges(members: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in members:
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def _lower_runs(single: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(start, count, stride, delta): code points start + k*stride map to themselves + delta."""
    runs: list[list[int]] = []
    for cp, low in single:
        delta = low - cp
        if runs:
            start, count, stride, d = runs[-1]
            last = start + (count - 1) * stride
            step = cp - last
            if d == delta and (step in (1, 2) if count == 1 else step == stride):
                runs[-1] = [start, count + 1, step, d]
                continue
        runs.append([cp, 1, 1, delta])
    return [tuple(r) for r in runs]  # type: ignore[misc]


def tables() -> dict[str, object]:
    chars = [chr(cp) for cp in range(MAX)]
    single: list[tuple[int, int]] = []
    multi: list[tuple[int, list[int]]] = []
    for cp, c in enumerate(chars):
        low = c.lower()
        if low == c:
            continue
        if len(low) == 1:
            single.append((cp, ord(low)))
        else:
            multi.append((cp, [ord(x) for x in low]))
    cased = [cp for cp, c in enumerate(chars) if _cased(c)]
    ignorable = [cp for cp, c in enumerate(chars) if _case_ignorable(c)]
    _check_against_cpython(cased, ignorable)
    return {
        "whitespace": [cp for cp, c in enumerate(chars) if c.isspace()],
        "lower_runs": _lower_runs(single),
        "lower_multi": multi,
        "cased": _ranges(cased),
        "case_ignorable": _ranges(ignorable),
        "non_printable": _ranges([cp for cp, c in enumerate(chars) if not c.isprintable()]),
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


def _flat(rows: list, per_line: int) -> str:
    nums = [str(n) for row in rows for n in (row if isinstance(row, tuple) else (row,))]
    lines = [", ".join(nums[i : i + per_line]) for i in range(0, len(nums), per_line)]
    return "\n".join(f"  {line}," for line in lines)


def render() -> str:
    t = tables()
    multi = ",\n".join(f"  [{cp}, [{', '.join(map(str, m))}]]" for cp, m in t["lower_multi"])
    return f"""\
// Generated by scripts/pyunicode_tables.py from Python {sys.version.split()[0]} (Unicode \
{unicodedata.unidata_version}). Do not edit:
// run `make vectors` (or the script) and commit. tests/unit/test_vectors.py checks it is current.

/** The Unicode version of Python's `unicodedata` these tables come from. */
export const PY_UNICODE_VERSION = "{unicodedata.unidata_version}";

/** Code points `str.strip()` removes (`str.isspace()`). */
export const WHITESPACE: readonly number[] = [
{_flat(t["whitespace"], 12)}
];

/** `str.lower()` of single characters: [start, count, stride, delta] runs. */
export const LOWER_RUNS: readonly number[] = [
{_flat(t["lower_runs"], 16)}
];

/** `str.lower()` of single characters that lower to several. */
export const LOWER_MULTI: readonly (readonly [number, readonly number[]])[] = [
{multi},
];

/** Cased (Lowercase | Uppercase | Lt): [first, last] ranges. */
export const CASED: readonly number[] = [
{_flat(t["cased"], 16)}
];

/** Case_Ignorable: [first, last] ranges. */
export const CASE_IGNORABLE: readonly number[] = [
{_flat(t["case_ignorable"], 16)}
];

/** Not `str.isprintable()` (escaped by `repr()`): [first, last] ranges. */
export const NON_PRINTABLE: readonly number[] = [
{_flat(t["non_printable"], 16)}
];
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text("utf-8") != text:
            print(f"stale: {OUT} (run `make vectors`)", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, "utf-8")
    print(OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
