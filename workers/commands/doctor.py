"""`doctor JOBS_FILE [--fix] [--json]`: migrate the gateway's scheduled jobs to Rule 2's modes.

Every job runs in a chat or in the background, never both. The doctor classifies each job
(the rules and the migration are in workers/core/job_modes.py) and reports it as kept,
migrated or quarantined. A `session:<key>` job that delivers elsewhere must become a
background job with its own session; it loses the <key> conversation as context, and the
report says so for each such job. Without --fix nothing is written.

Only a row Rule 2 cannot handle is quarantined: not an object, no usable id, a duplicate id,
an unusable session target. A row with other problems (`enabled: "true"`, a float
`createdAtMs`, a schedule kind the doctor does not know) is kept as it is, and each problem
is a warning in the report (text and --json); a job whose mode or delivery depends on an
unreadable field is kept and flagged for review.

The store is rewritten as it was read: every number keeps the text it had (`1e400`, `1E5`,
`-0`; JSON has no Infinity, and Python would write `1e400` as one), and so does every other
value. A store holding NaN or Infinity (not JSON), or nested more than MAX_DEPTH levels
deep, is refused (exit 2, naming the line).

--fix rewrites JOBS_FILE, and only when something changes:

  1. the new store goes to a temporary file beside JOBS_FILE (fsynced, same permissions);
  2. a backup of the bytes read goes to JOBS_FILE.bak-<UTC timestamp>;
  3. JOBS_FILE is read again: if its bytes or its mtime/size/inode differ from the first
     read, another writer (the gateway) changed it: the doctor removes its temporary file
     and backup and refuses (exit 2), leaving JOBS_FILE as that writer left it;
  4. quarantined rows are appended to JOBS_FILE.quarantine.json ({"version": 1,
     "quarantine": [{job, reason, index, at, by}]}): a sibling file the gateway never
     rewrites, so a quarantined job is never lost; a re-run adds no duplicate entry;
  5. os.replace puts the new store in place (atomic), and the directory is fsynced;
  6. one JSON line per changed job is appended to JOBS_FILE.doctor-ledger.jsonl:
     {at, by, file, backup, job_id, index, action, reason, before, after}.

The check in step 3 narrows the race with a running gateway but cannot close it (the
gateway takes no file lock): stop the gateway for a guaranteed rewrite.

Exit codes: 0 nothing to migrate or quarantine (warnings and jobs to review included); 1
something must be (or, with --fix, was) migrated or quarantined; 2 the file cannot be read as
a job store (the message names the file, and the line or field), or --fix refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from transcript_connector.records import AGENT_ID_PATTERN
from transcript_connector.session_keys import DM_SCOPES, DmScope

from schemas.jobs import DEFAULT_AGENT_ID
from workers.core.errors import OwnerError
from workers.core.job_modes import (
    DOCTOR,
    Plan,
    merge_quarantine,
    plan_store,
    store_problem,
)

BACKUP_SUFFIX = ".bak-"
LEDGER_SUFFIX = ".doctor-ledger.jsonl"
QUARANTINE_SUFFIX = ".quarantine.json"
MAX_DEPTH = 200  # levels of nesting in a store (pydantic's limit for JSON, too)


class DoctorError(OwnerError):
    """The doctor cannot go on (exit 2). Subclasses say why.

    DoctorError
     ├── UnreadableStore   the file is missing, not JSON, or not shaped like a job store
     └── StoreChanged      --fix refused: another writer changed the file while we ran
    """


class UnreadableStore(DoctorError):
    pass


class StoreChanged(DoctorError):
    pass


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The store file as first read: its bytes and what identifies this version of it."""

    path: Path
    raw: bytes
    digest: str
    stat: tuple[int, int, int]  # mtime_ns, size, inode
    mode: int


@dataclass(frozen=True, slots=True)
class Applied:
    backup: Path
    ledger: Path
    quarantine_file: Path | None


@dataclass(frozen=True, slots=True)
class Report:
    path: Path
    plan: Plan
    dm_scope: DmScope
    applied: Applied | None


# --- CLI --------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="JOBS_FILE", help="the gateway's job store (jobs.json)")
    parser.add_argument(
        "--fix",
        action="store_true",
        help="rewrite the store (atomically, with a backup, a ledger and a quarantine file)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--dm-scope",
        choices=DM_SCOPES,
        default="per-channel-peer",
        help="the agents' DM scope, to build direct-message keys (default per-channel-peer)",
    )
    parser.add_argument(
        "--default-agent",
        type=_agent_id,
        default=DEFAULT_AGENT_ID,
        metavar="AGENT_ID",
        help=f"agent of jobs that name none (default {DEFAULT_AGENT_ID})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        report = doctor(
            Path(args.file),
            fix=args.fix,
            dm_scope=args.dm_scope,
            default_agent=args.default_agent,
            now=datetime.now(UTC),
        )
    except DoctorError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return 2
    out = (
        json.dumps(to_json(report), indent=2, ensure_ascii=False)
        if args.json
        else render_text(report)
    )
    print(out)
    return 1 if report.plan.needs_changes else 0


def _agent_id(value: str) -> str:
    if not re.fullmatch(AGENT_ID_PATTERN, value):
        raise argparse.ArgumentTypeError(f"{value!r} is not an agent id ({AGENT_ID_PATTERN})")
    return value


# --- the work -----------------------------------------------------------------------------


def doctor(
    path: Path,
    *,
    fix: bool,
    dm_scope: DmScope,
    now: datetime,
    default_agent: str = DEFAULT_AGENT_ID,
    before_commit: Callable[[], None] | None = None,
) -> Report:
    """Read, classify, and with `fix` apply. `before_commit` runs just before the final
    unchanged-check (a test seam: another writer modifying the file there must be caught)."""
    snapshot, doc = read_store(path)
    plan = plan_store(doc, dm_scope=dm_scope, at=now, default_agent=default_agent)
    applied = None
    if fix and plan.needs_changes:
        applied = apply(snapshot, plan, now, before_commit=before_commit)
    return Report(path, plan, dm_scope, applied)


def read_store(path: Path) -> tuple[Snapshot, dict[str, Any]]:
    """The file's snapshot and its parsed store; UnreadableStore naming file, line, field."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read()
    except FileNotFoundError:
        raise UnreadableStore(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UnreadableStore(f"{path}: is a directory, not a job store") from None
    except OSError as exc:
        raise UnreadableStore(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableStore(f"{path}: not UTF-8 (byte {exc.start})") from None
    try:
        doc = load_json(text)
    except json.JSONDecodeError as exc:
        raise UnreadableStore(
            f"{path}: not JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:  # NotJson among them: NaN, Infinity, too deep
        raise UnreadableStore(f"{path}: not JSON: {exc}") from None
    problem = store_problem(doc)
    if problem is not None:
        raise UnreadableStore(f"{path}: not a job store: {problem}")
    snapshot = Snapshot(
        path, raw, hashlib.sha256(raw).hexdigest(), _identity(st), st.st_mode & 0o7777
    )
    return snapshot, doc


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def apply(
    snapshot: Snapshot,
    plan: Plan,
    now: datetime,
    *,
    before_commit: Callable[[], None] | None = None,
) -> Applied:
    """Write the plan (steps 1-6 of the module docstring). StoreChanged when refused."""
    path = snapshot.path
    text = dump_json(plan.store, indent=2)
    if snapshot.raw.endswith(b"\n"):
        text += "\n"
    temp = _write_temp(path, text.encode("utf-8"), snapshot.mode)
    backup: Path | None = None
    try:
        backup = _write_backup(path, snapshot, now)
        if before_commit is not None:
            before_commit()
        _check_unchanged(snapshot)
        quarantine_file = _write_quarantine(path, plan, snapshot.mode) if plan.quarantine else None
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        if backup is not None:
            backup.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    ledger = _append_ledger(path, plan, now, backup)
    return Applied(backup, ledger, quarantine_file)


def _check_unchanged(snapshot: Snapshot) -> None:
    path = snapshot.path
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read()
    except OSError as exc:
        raise StoreChanged(
            f"{path}: refusing to rewrite: it cannot be read again ({exc.strerror}); "
            "nothing was written"
        ) from None
    if hashlib.sha256(raw).hexdigest() != snapshot.digest:
        what = "its content changed"
    elif _identity(st) != snapshot.stat:
        what = "it was rewritten (mtime, size or inode changed)"
    else:
        return
    raise StoreChanged(
        f"{path}: refusing to rewrite: {what} while the doctor ran (is the gateway running?); "
        "nothing was written — run the doctor again, or stop the gateway first"
    )


def _write_temp(path: Path, data: bytes, mode: int) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def _write_backup(path: Path, snapshot: Snapshot, now: datetime) -> Path:
    """The bytes first read, in a new file JOBS_FILE.bak-<timestamp>[-N] (never overwrites)."""
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        backup = path.with_name(f"{path.name}{BACKUP_SUFFIX}{stamp}" + (f"-{n}" if n else ""))
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, snapshot.mode or 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(snapshot.raw)
            f.flush()
            os.fsync(f.fileno())
        return backup
    raise DoctorError(f"{path}: cannot name a backup: {path.name}{BACKUP_SUFFIX}{stamp}-* taken")


def _write_quarantine(path: Path, plan: Plan, mode: int) -> Path:
    """Append the plan's quarantined rows to JOBS_FILE.quarantine.json (atomically)."""
    qpath = path.with_name(path.name + QUARANTINE_SUFFIX)
    existing: list[Mapping[str, Any]] = []
    if qpath.exists():
        try:
            doc = load_json(qpath.read_text("utf-8"))
            existing = doc["quarantine"]
            if not isinstance(existing, list):
                raise TypeError("quarantine is not an array")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DoctorError(
                f"{qpath}: cannot add to the quarantine file ({exc}); nothing was written"
            ) from None
    merged = {"version": 1, "quarantine": merge_quarantine(existing, plan.quarantine)}
    data = (dump_json(merged, indent=2) + "\n").encode("utf-8")
    temp = _write_temp(qpath, data, mode)
    try:
        os.replace(temp, qpath)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return qpath


def _append_ledger(path: Path, plan: Plan, now: datetime, backup: Path) -> Path:
    ledger = path.with_name(path.name + LEDGER_SUFFIX)
    at = now.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    lines = [
        dump_json(
            {
                "at": at,
                "by": DOCTOR,
                "file": str(path.resolve()),
                "backup": str(backup.resolve()),
                "job_id": c.job_id,
                "index": c.index,
                "action": c.action,
                "reason": c.reason,
                "before": c.before,
                "after": c.after,
            },
            indent=None,
        )
        + "\n"
        for c in plan.changes
    ]
    with open(ledger, "a", encoding="utf-8") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())
    return ledger


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not every platform opens directories
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- the store's JSON text: values written back as they were read ---------------------------


class NotJson(OwnerError, ValueError):
    """The text holds NaN or Infinity, or nests more than MAX_DEPTH levels (line, column)."""


class _Literal:
    """A number that remembers the text it was read as; its repr is that text."""

    __slots__ = ()
    text: str

    def __new__(cls, text: str):  # noqa: ANN204  (the subclass's own type)
        number = super().__new__(cls, text)  # type: ignore[call-arg]
        number.text = text
        return number

    def __repr__(self) -> str:
        return self.text


class JsonFloat(_Literal, float):
    """A JSON number with a fraction or an exponent: its value, and the text it was read as.

    Validation sees the value (`1e400` is inf); `dump_json` writes the text back, so a
    number Python would spell differently (or not as JSON at all) stays as the gateway wrote
    it. repr is the text too: two numbers are one only when they were written alike.
    """

    __slots__ = ("text",)


class JsonInt(_Literal, int):
    """An integer written unlike Python's spelling of its value (`-0`): kept as written."""


def _int(text: str) -> int | JsonFloat:
    try:
        value = int(text)
    except ValueError:  # more digits than Python converts: a number all the same
        return JsonFloat(text)
    return value if repr(value) == text else JsonInt(text)


class _Constant(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _Constant(name)


NEWLINE = "\n"
_encode_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
# Outside strings, the tokens that nest, and the constants JSON does not have.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]|NaN|-?Infinity')


def load_json(text: str) -> Any:
    """json.loads, but numbers keep their text (JsonFloat, JsonInt); NotJson for NaN,
    Infinity or nesting deeper than MAX_DEPTH, naming the line and column."""
    too_deep = f"nested more than {MAX_DEPTH} levels deep"
    try:
        value = json.loads(
            text, parse_float=JsonFloat, parse_int=_int, parse_constant=_reject_constant
        )
    except _Constant as exc:
        where = _where(text, _first(text, "constant"))
        raise NotJson(f"{where}{exc} is not a JSON value") from None
    except RecursionError:
        raise NotJson(f"{_where(text, _first(text, 'deep'))}{too_deep}") from None
    deep = _first(text, "deep")
    if deep is not None:
        raise NotJson(f"{_where(text, deep)}{too_deep}")
    return value


def _first(text: str, what: str) -> int | None:
    """The offset of the first constant, or of the first bracket past MAX_DEPTH levels.

    Exact on a text that is JSON up to that point (json.loads got past it, or stopped there).
    """
    depth = 0
    for m in _TOKENS.finditer(text):
        token = m.group()
        if token in ("[", "{"):
            depth += 1
            if what == "deep" and depth > MAX_DEPTH:
                return m.start()
        elif token in ("]", "}"):
            depth -= 1
        elif what == "constant" and token[0] != '"':
            return m.start()
    return None


def _where(text: str, offset: int | None) -> str:
    """`line N, column C: ` of an offset (as json's errors count them); "" for None."""
    if offset is None:
        return ""
    line = text.count(NEWLINE, 0, offset) + 1
    return f"line {line}, column {offset - text.rfind(NEWLINE, 0, offset)}: "


def dump_json(value: Any, *, indent: int | None) -> str:
    """json.dumps(value, indent=indent, ensure_ascii=False), numbers from load_json written
    as they were read. Raises ValueError on a NaN or an infinity of another origin."""
    out: list[str] = []
    _dump(value, indent, 0, out)
    return "".join(out)


def _dump(value: Any, indent: int | None, level: int, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_encode_string(value))
    elif value is None or value is True or value is False:
        out.append({None: "null", True: "true", False: "false"}[value])
    elif isinstance(value, JsonFloat | JsonInt):
        out.append(value.text)
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no JSON spelling")
        out.append(float.__repr__(value))
    elif isinstance(value, dict | list | tuple):
        items = list(value.items()) if isinstance(value, dict) else list(value)
        brackets = "{}" if isinstance(value, dict) else "[]"
        if not items:
            out.append(brackets)
            return
        inner = "" if indent is None else "\n" + " " * (indent * (level + 1))
        sep = ", " if indent is None else "," + inner
        out.append(brackets[0] + inner)
        for n, item in enumerate(items):
            if n:
                out.append(sep)
            if isinstance(value, dict):
                key, item = item
                out.append(_encode_string(str(key)) + ": ")
            _dump(item, indent, level + 1, out)
        out.append(("" if indent is None else "\n" + " " * (indent * level)) + brackets[1])
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


# --- output -------------------------------------------------------------------------------


def to_json(report: Report) -> dict[str, Any]:
    """{"jobs": [{id, name, mode, action, reason, review, warnings}], "summary": {...}}."""
    a = report.applied
    return {
        "jobs": [
            {
                "id": v.job_id,
                "name": v.name,
                "mode": v.mode,
                "action": v.action,
                "reason": v.reason,
                "review": v.review,
                "warnings": list(v.warnings),
            }
            for v in report.plan.verdicts
        ],
        "summary": {
            "file": str(report.path),
            "dm_scope": report.dm_scope,
            **report.plan.counts(),
            "fixed": a is not None,
            "backup": str(a.backup) if a else None,
            "ledger": str(a.ledger) if a else None,
            "quarantine_file": str(a.quarantine_file) if a and a.quarantine_file else None,
        },
    }


def render_text(report: Report) -> str:
    plan, applied = report.plan, report.applied
    dry = {"migrated": "migrate", "quarantined": "quarantine"}
    rows = [("ID", "NAME", "MODE", "ACTION", "REASON")]
    for v in plan.verdicts:
        action = v.action if applied or v.action == "kept" else dry[v.action]
        rows.append(
            (
                v.job_id or "-",
                _clip(v.name or "-", 28),
                v.mode or "-",
                action + (" (review)" if v.review else ""),
                v.reason,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        f"{report.path}: {len(plan.verdicts)} jobs (DM scope {report.dm_scope})",
        "",
        *(
            "  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4]
            for r in rows
        ),
        "",
    ]
    n = plan.counts()
    tally = f"{n['in_chat']} in chat, {n['background']} background"
    if not plan.needs_changes:
        quiet = not (n["review"] or n["warned"])
        done = "Nothing to do" if quiet else "Nothing to migrate or quarantine"
        lines.append(f"{tally}. {done}: every job runs in one mode.")
    elif applied is None:
        lines.append(
            f"{tally}. To migrate: {n['migrated']}, to quarantine: {n['quarantined']}. "
            "Run with --fix to apply (writes a backup, a ledger and a quarantine file)."
        )
    else:
        lines.append(f"{tally}. Migrated: {n['migrated']}, quarantined: {n['quarantined']}.")
        lines.append(f"Backup: {applied.backup}")
        lines.append(f"Ledger: {applied.ledger}")
        if applied.quarantine_file:
            lines.append(f"Quarantine: {applied.quarantine_file}")
    if n["migrated"]:
        lines.append(
            "A migrated job runs in its own session from then on: it loses its chat's "
            "conversation as context."
        )
    if n["review"]:
        lines.append(
            f"{n['review']} job(s) kept whose mode or delivery could not be resolved: "
            "check them by hand."
        )
    if n["warned"]:
        lines += [
            "",
            f"Warnings: {n['warned']} job(s) kept as they are, with fields the doctor does not "
            "need for Rule 2 but the gateway may reject:",
            *(
                f"  jobs[{v.index}] {v.job_id}: {warning}"
                for v in plan.verdicts
                for warning in v.warnings
            ),
        ]
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


__all__ = [
    "Applied",
    "DoctorError",
    "Report",
    "Snapshot",
    "StoreChanged",
    "UnreadableStore",
    "add_arguments",
    "apply",
    "doctor",
    "read_store",
    "render_text",
    "run",
    "to_json",
]
