"""`replay`: JSON lines in, one outcome line per non-blank input line out, in order."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.unit.wire import confirmation, dumps, reset, with_
from workers.commands.replay import replay

ROOT = Path(__file__).resolve().parents[2]
WRITTEN_AT = "2025-04-01T00:00:00Z"

INPUT = (
    b"\n".join(
        [
            dumps(confirmation(send_id="a")),
            dumps(confirmation(send_id="a")),  # redelivery
            b"",  # blank: skipped, but counted in line numbers
            b"{not json",
            dumps(reset(reset_at="2025-03-01T12:30:00Z")),
            dumps(confirmation(send_id="b", session_key="Telegram:Group:-100123")),
            dumps(with_(confirmation(send_id="b"), **{"payload.text": "changed"})),
            b"   ",
            dumps(confirmation(send_id="c", payload={"native": [{"kind": "embed"}]})),
        ]
    )
    + b"\n"
)


def _replay_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "workers", "replay", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_replay_from_stdin() -> None:
    done = _replay_cli("-", "--written-at", WRITTEN_AT, stdin=INPUT)
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(o["line"], o["outcome"]) for o in out] == [
        (1, "written"),
        (2, "duplicate"),
        (4, "dead_letter"),
        (5, "reset"),
        (6, "written"),
        (7, "conflict"),
        (9, "native_only"),
    ]
    assert all(list(o)[:4] == ["line", "outcome", "session_key", "send_id"] for o in out)
    first, dup, dead, rst, second, conflict, native = out
    assert first["entry"]["seq"] == 1 and first["entry"]["epoch"] == 0
    assert first["entry"]["written_at"] == WRITTEN_AT
    assert "diagnostics" not in first and "error" not in first
    assert "entry" not in dup and dup["send_id"] == "a"
    assert dead["error"].startswith("not JSON") and dead["session_key"] is None
    assert rst["send_id"] is None and rst["session_key"] == "agent:ops:telegram:group:-100123"
    assert (second["entry"]["seq"], second["entry"]["epoch"]) == (2, 1)
    assert [d["code"] for d in second["diagnostics"]] == ["session_key_mismatch"]
    assert [d["code"] for d in conflict["diagnostics"]] == ["conflicting_duplicate"]
    assert [d["code"] for d in native["diagnostics"]] == ["native_only_payload"]
    summary = json.loads(done.stderr.splitlines()[-1])
    assert summary["lines"] == 7
    assert summary["outcomes"]["written"] == 2 and summary["outcomes"]["skipped_same_turn"] == 0


def test_replay_of_a_file_is_byte_identical_with_a_fixed_written_at(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(INPUT)
    one = _replay_cli(str(path), "--written-at", WRITTEN_AT)
    two = _replay_cli(str(path), "--written-at", WRITTEN_AT)
    assert one.returncode == two.returncode == 0
    assert (
        one.stdout == two.stdout == _replay_cli("-", "--written-at", WRITTEN_AT, stdin=INPUT).stdout
    )


def test_replay_rejects_a_naive_written_at_and_a_missing_file(tmp_path: Path) -> None:
    assert _replay_cli("-", "--written-at", "2025-04-01T00:00:00").returncode == 2
    missing = _replay_cli(str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and b"cannot read" in missing.stderr


def test_replay_function_streams_and_counts() -> None:
    out = io.BytesIO()
    lines = io.BytesIO(INPUT * 3)
    counts = replay(
        lines, out, written_at=datetime(2025, 4, 1, tzinfo=UTC), dedupe_window=timedelta(days=7)
    )
    assert sum(counts.values()) == 21 == len(out.getvalue().splitlines())
    assert counts["written"] == 2  # the second and third copies are all redeliveries
    assert out.getvalue().endswith(b"}\n")


def test_crlf_line_endings_are_accepted() -> None:
    out = io.BytesIO()
    replay(
        io.BytesIO(dumps(confirmation()) + b"\r\n"),
        out,
        written_at=datetime(2025, 4, 1, tzinfo=UTC),
        dedupe_window=timedelta(days=7),
    )
    assert json.loads(out.getvalue())["outcome"] == "written"
