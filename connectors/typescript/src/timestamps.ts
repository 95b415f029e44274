/**
 * Timestamps as the worker accepts them (DESIGN.md Rule 1): RFC 3339 with a UTC offset, within
 * 1970-01-01T00:00:00Z..2999-12-31T23:59:59Z once converted to UTC.
 *
 * Never looser than the worker (pydantic): every timestamp accepted here is accepted there.
 * Stricter where the JSON Schema (format date-time) is: seconds are required, the fraction
 * separator is `.`, the offset is `Z` or `±HH:MM` (pydantic also takes `12:00Z`, `,5`,
 * `+0100`, and a string of digits as a unix time). The range is checked on the instant as
 * pydantic checks it: the fraction truncated to microseconds.
 */

export const TIMESTAMP_RANGE = "1970-01-01T00:00:00Z..2999-12-31T23:59:59Z";
const MIN_S = Date.UTC(1970, 0, 1) / 1000;
const MAX_S = Date.UTC(2999, 11, 31, 23, 59, 59) / 1000;
const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))?$/;

/** Why `value` is not a contract timestamp (the worker's wording), or null when it is one. */
export function timestampProblem(value: string): string | null {
  const found = examine(value);
  return typeof found === "string" ? found : null;
}

/**
 * The instant of a contract timestamp in microseconds since 1970-01-01T00:00:00Z (the fraction
 * truncated to microseconds, as Python's datetime holds it), or null when it is none.
 */
export function timestampMicros(value: string): bigint | null {
  const found = examine(value);
  return typeof found === "string" ? null : found;
}

function examine(value: string): string | bigint {
  const m = RFC3339.exec(value);
  if (!m) return "not an RFC 3339 timestamp";
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number, number, number, number, number, number,
  ];
  const fraction = m[7] ?? "";
  // an offset moves the date by less than a day: other years are out of range (and Date.UTC
  // would read years 0..99 as 1900..1999)
  if (year < 1969 || year > 3000) return `timestamp outside ${TIMESTAMP_RANGE}`;
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) {
    return "not an RFC 3339 timestamp (no such date)";
  }
  if (hour > 23 || minute > 59 || second > 59) return "not an RFC 3339 timestamp (no such time)";
  let offsetS = 0;
  if (!m[8]) {
    if (!m[9]) return "timestamp needs a UTC offset";
    const oh = Number(m[10]);
    const om = Number(m[11]);
    if (oh > 23 || om > 59) return "not an RFC 3339 timestamp (offset out of range)";
    offsetS = (m[9] === "-" ? -1 : 1) * (oh * 3600 + om * 60);
  }
  const utcS = Date.UTC(year, month - 1, day, hour, minute, second) / 1000 - offsetS;
  const micros = Number(fraction.slice(0, 6).padEnd(6, "0"));
  if (utcS < MIN_S || utcS > MAX_S || (utcS === MAX_S && micros > 0)) {
    return `timestamp outside ${TIMESTAMP_RANGE}`;
  }
  return BigInt(utcS) * 1_000_000n + BigInt(micros);
}

function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/** A Date or a string as the record's timestamp text, or the problem with it. */
export function timestampText(value: unknown): string | { problem: string } {
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) return { problem: "not an RFC 3339 timestamp (an invalid Date)" };
    const text = value.toISOString();
    const problem = timestampProblem(text);
    return problem ? { problem } : text;
  }
  if (typeof value !== "string") return { problem: "must be an RFC 3339 string or a Date" };
  const problem = timestampProblem(value);
  return problem ? { problem } : value;
}
