/**
 * Python's `str.strip()`, `str.lower()` and `repr(str)`, in TypeScript.
 *
 * The canonical session key is defined by the Python worker (transcript_connector/session_keys.py).
 * JavaScript's own `trim()` and `toLowerCase()` differ from Python's in exactly the places that
 * would split one chat in two:
 * - `trim()` removes U+FEFF (BOM) and keeps U+001C..U+001F and U+0085; `str.strip()` does the
 *   opposite.
 * - `toLowerCase()` follows Node's ICU (a newer Unicode than Python's `unicodedata`): Node 20
 *   lowercases 55 code points that Python 3.11 leaves alone, and places the final sigma
 *   differently beside about 400.
 * So these functions use the tables the Python side pins (transcript_connector/unicode_tables.py,
 * Unicode 14.0.0 as Python 3.11 has it; src/pyunicode-tables.ts is written from it by
 * scripts/pyunicode_tables.py) and never call `trim()` or `toLowerCase()` on non-ASCII text: the
 * worker's py_lower/py_strip read the same tables, whatever Python runs it.
 * Strings are treated as Python treats `str`: a sequence of code points, a lone surrogate
 * being one.
 */

import {
  CASE_IGNORABLE,
  CASED,
  LOWER_MULTI,
  LOWER_RUNS,
  NON_PRINTABLE,
  PY_UNICODE_VERSION,
  WHITESPACE,
} from "./pyunicode-tables.js";

export { PY_UNICODE_VERSION };

const SPACE = new Set<number>(WHITESPACE);
const LOWER = new Map<number, string>();
for (let i = 0; i < LOWER_RUNS.length; i += 4) {
  const [start, count, stride, delta] = LOWER_RUNS.slice(i, i + 4) as [number, number, number, number];
  for (let k = 0; k < count; k++) {
    const cp = start + k * stride;
    LOWER.set(cp, String.fromCodePoint(cp + delta));
  }
}
for (const [cp, mapped] of LOWER_MULTI) LOWER.set(cp, String.fromCodePoint(...mapped));

const CAPITAL_SIGMA = 0x3a3;
const ASCII = /^[\x00-\x7f]*$/;

function inRanges(ranges: readonly number[], cp: number): boolean {
  // ranges: [first, last, first, last, …], sorted; binary search over the pairs
  let lo = 0;
  let hi = ranges.length / 2 - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cp < ranges[2 * mid]!) hi = mid - 1;
    else if (cp > ranges[2 * mid + 1]!) lo = mid + 1;
    else return true;
  }
  return false;
}

/** Python's `str.isspace()` of one code point (what `str.strip()` removes). */
export function isPySpace(cp: number): boolean {
  return SPACE.has(cp);
}

/** Python's `s.strip()`: removes leading and trailing whitespace as Python defines it. */
export function pyStrip(s: string): string {
  // every Python whitespace character is in the BMP, and no surrogate is one: code units do
  let start = 0;
  let end = s.length;
  while (start < end && SPACE.has(s.charCodeAt(start))) start++;
  while (end > start && SPACE.has(s.charCodeAt(end - 1))) end--;
  return start === 0 && end === s.length ? s : s.slice(start, end);
}

function codePoints(s: string): number[] {
  return Array.from(s, (c) => c.codePointAt(0)!);
}

/** CPython's handle_capital_sigma: is the Σ at `i` in the Final_Sigma context? */
function finalSigma(cps: readonly number[], i: number): boolean {
  let j = i - 1;
  while (j >= 0 && inRanges(CASE_IGNORABLE, cps[j]!)) j--;
  if (j < 0 || !inRanges(CASED, cps[j]!)) return false;
  j = i + 1;
  while (j < cps.length && inRanges(CASE_IGNORABLE, cps[j]!)) j++;
  return j === cps.length || !inRanges(CASED, cps[j]!);
}

/** Python's `s.lower()`: full lowercase mapping (İ → i̇), final sigma, Python's Unicode version. */
export function pyLower(s: string): string {
  if (ASCII.test(s)) return s.toLowerCase(); // ASCII: the same in both languages
  const cps = codePoints(s);
  let out = "";
  for (let i = 0; i < cps.length; i++) {
    const cp = cps[i]!;
    if (cp === CAPITAL_SIGMA) out += finalSigma(cps, i) ? "\u03c2" : "\u03c3";
    else out += LOWER.get(cp) ?? String.fromCodePoint(cp);
  }
  return out;
}

function hex(cp: number, width: number): string {
  return cp.toString(16).padStart(width, "0");
}

/** Python's `repr(s)` of a str (quotes and escapes as CPython chooses them). */
export function pyRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const cp of codePoints(s)) {
    const c = String.fromCodePoint(cp);
    if (c === quote || c === "\\") out += "\\" + c;
    else if (c === "\t") out += "\\t";
    else if (c === "\n") out += "\\n";
    else if (c === "\r") out += "\\r";
    else if (cp < 0x20 || cp === 0x7f) out += "\\x" + hex(cp, 2);
    else if (cp < 0x7f || !inRanges(NON_PRINTABLE, cp)) out += c;
    else if (cp <= 0xff) out += "\\x" + hex(cp, 2);
    else if (cp <= 0xffff) out += "\\u" + hex(cp, 4);
    else out += "\\U" + hex(cp, 8);
  }
  return out + quote;
}
