"""`doctor JOBS_FILE`: the shell around job_modes — files, --fix, exit codes, CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import workers.commands.doctor as doctor_mod
from workers.cli import main
from workers.commands.doctor import StoreChanged, doctor, dump_json, load_json
from workers.core.job_modes import migrated_row

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "unit" / "data" / "jobs" / "sample-store.json"
NOW = datetime(2026, 1, 15, 9, 30, 0, tzinfo=UTC)

# The sample store's jobs, by id prefix: (mode, action) — every sessionTarget form.
SAMPLE_VERDICTS = [
    ("0b6f2a4e", "background", "kept"),  # isolated
    ("1c7e3b5f", "in_chat", "kept"),  # main
    ("2d8f4c6a", "background", "kept"),  # current
    ("3e9a5d7b", "in_chat", "kept"),  # session:<forum topic>, delivers there via threadId
    ("4fab6e8c", "background", "migrated"),  # session:<DM, spelled Telegram:DM>, to another DM
    ("5abc7f9d", "in_chat", "kept"),  # session:<key without agent:>, to = the key, other case
    ("6bcd80ae", "in_chat", "kept"),  # delivery channel last
    ("7cde91bf", "in_chat", "kept"),  # delivery none
    ("8def02c0", "background", "migrated"),  # session:<slack channel>, to another channel
    ("1c7e3b5f", None, "quarantined"),  # duplicate id (a restored copy)
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.json"
    shutil.copyfile(SAMPLE, path)
    return path


def write_store(path: Path, jobs: list[Any], **top: Any) -> Path:
    path.write_text(json.dumps({"version": 1, "jobs": jobs, **top}, indent=2) + "\n", "utf-8")
    return path


def cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["doctor", *args])
    out, err = capsys.readouterr()
    return code, out, err


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p != path)


def sample_job(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "j",
        "agentId": "main",
        "name": "n",
        "enabled": True,
        "schedule": {"kind": "every", "everyMs": 60000},
        "sessionTarget": "session:agent:main:telegram:direct:42",
        "payload": {"kind": "agentTurn", "message": "m"},
        "delivery": {"mode": "announce", "channel": "telegram", "to": "42"},
    }
    row.update(fields)
    return row


# --- report -----------------------------------------------------------------------------------


def test_the_sample_store_is_classified_job_by_job(store: Path) -> None:
    report = doctor(store, fix=False, dm_scope="per-channel-peer", now=NOW)
    got = [(v.job_id[:8] if v.job_id else None, v.mode, v.action) for v in report.plan.verdicts]
    assert got == SAMPLE_VERDICTS
    for v in report.plan.verdicts:
        if v.action == "migrated":
            assert "loses the agent:main:" in v.reason and "conversation as context" in v.reason


def test_a_dry_run_writes_nothing_and_exits_1(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = store.read_bytes()
    code, out, err = cli(str(store), capsys=capsys)
    assert (code, err) == (1, "")
    assert store.read_bytes() == before and siblings(store) == []
    assert "To migrate: 2, to quarantine: 1. Run with --fix" in out
    assert "loses the agent:main:telegram:direct:123456789 conversation as context" in out
    header = out.splitlines()[2].split()
    assert header == ["ID", "NAME", "MODE", "ACTION", "REASON"]


def test_json_report_shape(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(str(store), "--json", capsys=capsys)
    assert code == 1
    doc = json.loads(out)
    assert list(doc) == ["jobs", "summary"]
    keys = ["id", "name", "mode", "action", "reason", "review", "warnings"]
    assert all(list(j) == keys for j in doc["jobs"])
    assert not any(j["review"] or j["warnings"] for j in doc["jobs"])
    assert [(j["id"][:8], j["mode"], j["action"]) for j in doc["jobs"]] == SAMPLE_VERDICTS
    assert doc["summary"] == {
        "file": str(store),
        "dm_scope": "per-channel-peer",
        "total": 10,
        "in_chat": 5,
        "background": 4,
        "kept": 7,
        "migrated": 2,
        "quarantined": 1,
        "review": 0,
        "warned": 0,
        "fixed": False,
        "backup": None,
        "ledger": None,
        "quarantine_file": None,
    }


def test_a_clean_store_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_store(tmp_path / "jobs.json", [sample_job(sessionTarget="isolated")])
    code, out, _ = cli(str(path), capsys=capsys)
    assert code == 0 and "Nothing to do" in out
    code, out, _ = cli(str(path), "--fix", capsys=capsys)
    assert code == 0 and siblings(path) == []


def test_the_dm_scope_option_reaches_the_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_store(tmp_path / "jobs.json", [sample_job(sessionTarget="session:main")])
    assert cli(str(path), capsys=capsys)[0] == 1
    assert cli(str(path), "--dm-scope", "main", capsys=capsys)[0] == 0


# --- --fix ------------------------------------------------------------------------------------


def test_fix_migrates_quarantines_backs_up_and_keeps_a_ledger(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original_bytes = store.read_bytes()
    original = json.loads(original_bytes)
    mode = 0o640
    store.chmod(mode)
    code, out, err = cli(str(store), "--fix", "--json", capsys=capsys)
    assert (code, err) == (1, "")
    summary = json.loads(out)["summary"]
    assert summary["fixed"] is True

    # the store: same top level, the duplicate moved out, two jobs migrated, nothing else touched
    new = json.loads(store.read_text("utf-8"))
    assert list(new) == list(original)
    assert store.read_text("utf-8").endswith("}\n")
    assert store.stat().st_mode & 0o777 == mode
    kept = original["jobs"][:9]
    assert len(new["jobs"]) == 9
    for before, after in zip(kept, new["jobs"], strict=True):
        if after.get("migratedFrom") is None:
            assert after == before and list(after) == list(before)
            continue
        at = list(before).index("sessionTarget")
        assert list(after) == [*list(before)[: at + 1], "migratedFrom", *list(before)[at + 1 :]]
        assert after["sessionTarget"] == "isolated"
        assert after["migratedFrom"]["sessionTarget"] == before["sessionTarget"]
        assert after["migratedFrom"]["by"] == "transcript-owner doctor"
        rest = {k: v for k, v in after.items() if k not in ("sessionTarget", "migratedFrom")}
        assert rest == {k: v for k, v in before.items() if k != "sessionTarget"}
    assert [j["id"][:8] for j in new["jobs"] if "migratedFrom" in j] == ["4fab6e8c", "8def02c0"]
    # unknown fields kept: lightContext, owner, bestEffort, failureAlert
    assert new["jobs"][3]["lightContext"] is True
    assert new["jobs"][5]["owner"] == {"agentId": "main", "declarationKey": "grove:main:changelog"}

    # the backup holds the bytes read
    backup = Path(summary["backup"])
    assert backup.name.startswith("jobs.json.bak-20") and backup.read_bytes() == original_bytes

    # the quarantine file holds the duplicate, with its reason
    quarantine = json.loads(Path(summary["quarantine_file"]).read_text("utf-8"))
    (entry,) = quarantine["quarantine"]
    assert entry["job"] == original["jobs"][9]
    assert entry["reason"].startswith("jobs[9]: duplicate id")

    # the ledger: one line per changed job
    ledger = [json.loads(line) for line in Path(summary["ledger"]).read_text().splitlines()]
    assert [(e["job_id"][:8], e["action"]) for e in ledger] == [
        ("4fab6e8c", "migrated"),
        ("8def02c0", "migrated"),
        ("1c7e3b5f", "quarantined"),
    ]
    first = ledger[0]
    assert first["before"] == {"sessionTarget": "session:agent:main:Telegram:DM:123456789"}
    assert first["after"]["sessionTarget"] == "isolated"
    assert first["backup"] == str(backup.resolve()) and first["by"] == "transcript-owner doctor"
    assert ledger[2]["after"] is None and ledger[2]["before"]["job"] == original["jobs"][9]
    assert sorted(siblings(store)) == sorted(
        [backup.name, "jobs.json.doctor-ledger.jsonl", "jobs.json.quarantine.json"]
    )


def test_a_second_run_finds_nothing_to_do(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(str(store), "--fix", capsys=capsys)[0] == 1
    after_fix = store.read_bytes()
    files = siblings(store)
    ledger = (store.parent / "jobs.json.doctor-ledger.jsonl").read_text()
    code, out, _ = cli(str(store), "--fix", capsys=capsys)
    assert code == 0 and "Nothing to do" in out
    assert "migrated from session:agent:main:Telegram:DM:123456789" in out
    assert store.read_bytes() == after_fix
    assert siblings(store) == files
    assert (store.parent / "jobs.json.doctor-ledger.jsonl").read_text() == ledger


def test_fix_output_names_backup_and_ledger(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(str(store), "--fix", capsys=capsys)
    assert code == 1
    assert "Migrated: 2, quarantined: 1." in out
    assert "Backup: " in out and "Ledger: " in out and "Quarantine: " in out


def test_quarantine_appends_to_an_existing_file_and_never_repeats(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    bad = {"id": "x", "sessionTarget": "sometimes", "payload": {"kind": "systemEvent"}}
    write_store(path, [bad])
    qfile = tmp_path / "jobs.json.quarantine.json"
    earlier = {"job": {"id": "old"}, "reason": "earlier", "index": 0, "at": "t", "by": "someone"}
    qfile.write_text(json.dumps({"version": 1, "quarantine": [earlier]}))
    doctor(path, fix=True, dm_scope="per-channel-peer", now=NOW)
    entries = json.loads(qfile.read_text())["quarantine"]
    assert [e["job"] for e in entries] == [{"id": "old"}, bad]
    # a crash after the quarantine write but before the store replace: the row is in both
    write_store(path, [bad])
    doctor(path, fix=True, dm_scope="per-channel-peer", now=NOW)
    assert [e["job"] for e in json.loads(qfile.read_text())["quarantine"]] == [{"id": "old"}, bad]
    assert json.loads(path.read_text())["jobs"] == []


def test_an_unreadable_quarantine_file_stops_the_fix_before_the_store_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_store(tmp_path / "jobs.json", [{"id": 5}])
    before = path.read_bytes()
    (tmp_path / "jobs.json.quarantine.json").write_text("{oops")
    code, _, err = cli(str(path), "--fix", capsys=capsys)
    assert code == 2 and "jobs.json.quarantine.json" in err
    assert path.read_bytes() == before
    assert siblings(path) == ["jobs.json.quarantine.json"]


# --- a store that changes while the doctor runs ------------------------------------------------


def test_fix_refuses_when_another_writer_changed_the_store(store: Path) -> None:
    theirs = b'{"version": 1, "jobs": []}\n'

    def gateway_writes() -> None:
        store.write_bytes(theirs)

    with pytest.raises(StoreChanged, match="refusing to rewrite: its content changed"):
        doctor(store, fix=True, dm_scope="per-channel-peer", now=NOW, before_commit=gateway_writes)
    assert store.read_bytes() == theirs
    assert siblings(store) == []  # no temp file, backup, ledger or quarantine left behind


def test_fix_refuses_when_the_store_was_replaced_with_the_same_bytes(store: Path) -> None:
    def gateway_rewrites_same_content() -> None:
        data = store.read_bytes()
        tmp = store.with_name("gateway.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, store)

    with pytest.raises(StoreChanged, match="mtime, size or inode"):
        doctor(
            store,
            fix=True,
            dm_scope="per-channel-peer",
            now=NOW,
            before_commit=gateway_rewrites_same_content,
        )
    assert siblings(store) == []


def test_the_cli_exits_2_and_leaves_the_file_untouched_when_it_changed_mid_run(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_backup = doctor_mod._write_backup
    changed = b'{"version": 1, "jobs": [], "note": "gateway saved"}'

    def backup_then_gateway_saves(*args: Any, **kwargs: Any) -> Path:
        written = real_backup(*args, **kwargs)
        store.write_bytes(changed)
        return written

    monkeypatch.setattr(doctor_mod, "_write_backup", backup_then_gateway_saves)
    code, out, err = cli(str(store), "--fix", capsys=capsys)
    assert (code, out) == (2, "")
    assert f"doctor: {store}: refusing to rewrite" in err and "run the doctor again" in err
    assert store.read_bytes() == changed
    assert siblings(store) == []


# --- unreadable stores: exit 2, naming the file, line and field -----------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"version": 1,\n  "jobs": [\n    {"id": "a",}\n  ]\n}', "not JSON: line 3, column 16"),
        ("", "not JSON: line 1, column 1"),
        ('{"version": 1, "jobs": [NaN]}', "not JSON: line 1, column 25: NaN is not a JSON value"),
        (
            '{"version": 1,\n  "jobs": [{"id": "a", "n": "NaN", "x": -Infinity}]}',
            "not JSON: line 2, column 41: -Infinity is not a JSON value",
        ),
        (
            '{"version": 1, "jobs": [' + "[" * 10_000 + "]" * 10_000 + "]}",
            "not JSON: line 1, column 223: nested more than 200 levels deep",
        ),
        (
            '{"version": 1,\n "jobs": [{"id": "a", "blob": ' + "[" * 300 + "]" * 300 + "}]}",
            "not JSON: line 2, column 228: nested more than 200 levels deep",
        ),
        ("[1, 2]", "not a job store: top level: must be a JSON object"),
        ('{"version": 1}', "not a job store: jobs: field required"),
        ('{"version": 1, "jobs": {"a": {}}}', "not a job store: jobs: must be a JSON array"),
        ('{"version": 3, "jobs": []}', "not a job store: version: must be 1 (found 3)"),
    ],
)
def test_an_unreadable_store_exits_2_naming_file_and_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(content, "utf-8")
    code, out, err = cli(str(path), "--fix", capsys=capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"doctor: {path}: {message}"), err
    assert path.read_text("utf-8") == content and siblings(path) == []


def test_a_missing_or_binary_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(str(tmp_path / "nope.json"), capsys=capsys)
    assert code == 2 and err == f"doctor: {tmp_path / 'nope.json'}: no such file\n"
    binary = tmp_path / "jobs.json"
    binary.write_bytes(b"\xff\xfe{}")
    code, _, err = cli(str(binary), capsys=capsys)
    assert code == 2 and "not UTF-8" in err
    code, _, err = cli(str(tmp_path), capsys=capsys)
    assert code == 2 and "is a directory" in err


def test_a_bad_default_agent_is_a_usage_error(store: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["doctor", str(store), "--default-agent", "Not An Agent"])
    assert exc.value.code == 2


# --- legacy stores and extra fields ---------------------------------------------------------


def test_a_legacy_store_keeps_its_legacy_fields(tmp_path: Path) -> None:
    legacy = [
        {  # no sessionTarget, no version: the gateway's default, main
            "id": "legacy-main",
            "name": "old reminder",
            "enabled": True,
            "schedule": {"kind": "at", "atMs": 1767225600000},
            "payload": {"kind": "systemEvent", "text": "stretch"},
        },
        {  # isolated: true, delivery on the payload
            "id": "legacy-isolated",
            "isolated": True,
            "enabled": True,
            "schedule": {"kind": "every", "everyMs": 3600000},
            "payload": {
                "kind": "agentTurn",
                "message": "news",
                "deliver": True,
                "provider": "telegram",
                "to": "42",
            },
            "notify": True,
        },
        sample_job(
            id="legacy-session",
            delivery=None,
            payload={
                "kind": "agentTurn",
                "message": "m",
                "deliver": True,
                "channel": "telegram",
                "to": "43",
            },
            customBlob={"nested": [1, 2.5, "x", None, {"deep": True}]},
        ),
    ]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": legacy}, indent=2), "utf-8")
    report = doctor(path, fix=True, dm_scope="per-channel-peer", now=NOW)
    assert [(v.job_id, v.mode, v.action) for v in report.plan.verdicts] == [
        ("legacy-main", "in_chat", "kept"),
        ("legacy-isolated", "background", "kept"),
        ("legacy-session", "background", "migrated"),
    ]
    new = json.loads(path.read_text("utf-8"))
    assert list(new) == ["jobs"]  # no version added
    assert new["jobs"][:2] == legacy[:2]
    assert new["jobs"][2]["customBlob"] == legacy[2]["customBlob"]
    assert new["jobs"][2]["payload"] == legacy[2]["payload"]
    assert not path.read_text("utf-8").endswith("\n")  # the file's own convention kept


def test_non_ascii_text_is_kept_as_written(tmp_path: Path) -> None:
    path = write_store(
        tmp_path / "jobs.json",
        [
            sample_job(
                name="Frühstück ☕", delivery={"mode": "announce", "channel": "telegram", "to": "9"}
            )
        ],
    )
    doctor(path, fix=True, dm_scope="per-channel-peer", now=NOW)
    text = path.read_text("utf-8")
    assert "Frühstück ☕" in text


# --- numbers, and every other value, are written back as they were read ----------------------

# Numbers Python would write back otherwise: 1e400 as Infinity (not JSON: neither Node nor the
# doctor reads it back), 1E5 as 100000.0, -0 as 0, 0.10 as 0.1, a 5,000-digit integer not at all.
ODD_NUMBERS = ["1e400", "-1e400", "1E5", "-0", "0.10", "1e-400", "1767250800000.0", "9" * 5000]


def _with_literals(doc: Any) -> str:
    """doc as json.dumps(indent=2) writes it, each string "#N" replaced by ODD_NUMBERS[N]."""
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    for n, literal in enumerate(ODD_NUMBERS):
        text = text.replace(f'"#{n}"', literal)
    return text


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} written: not JSON")

    return json.loads(text, parse_constant=refuse, parse_int=str, parse_float=str)


def test_fix_writes_every_number_back_as_it_was_read(tmp_path: Path) -> None:
    numbers = {"createdAtMs": "#6", "custom": [f"#{n}" for n in range(len(ODD_NUMBERS))]}
    staying = sample_job(id="staying", delivery={"mode": "none"}, **numbers)
    moving = sample_job(
        id="moving", delivery={"mode": "announce", "channel": "telegram", "to": "43"}
    )
    moving.update(numbers)
    duplicate = {**staying, "name": "a restored copy"}
    path = tmp_path / "jobs.json"
    path.write_text(_with_literals({"version": 1, "jobs": [staying, moving, duplicate]}), "utf-8")

    report = doctor(path, fix=True, dm_scope="per-channel-peer", now=NOW)
    assert [v.action for v in report.plan.verdicts] == ["kept", "migrated", "quarantined"]
    assert report.plan.verdicts[0].warnings == ("createdAtMs: input should be a valid integer",)
    # byte for byte what the gateway wrote, but for the migration of sessionTarget
    reason = report.plan.verdicts[1].reason
    migrated = migrated_row(moving, reason=reason, at="2026-01-15T09:30:00Z")
    written = path.read_text("utf-8")
    assert written == _with_literals({"version": 1, "jobs": [staying, migrated]})
    _strict(written)
    # the quarantined copy and the ledger keep the numbers too
    quarantine = (tmp_path / "jobs.json.quarantine.json").read_text("utf-8")
    (entry,) = _strict(quarantine)["quarantine"]
    assert entry["job"]["custom"] == ODD_NUMBERS and entry["job"]["createdAtMs"] == ODD_NUMBERS[6]
    ledger = (tmp_path / "jobs.json.doctor-ledger.jsonl").read_text("utf-8").splitlines()
    assert _strict(ledger[1])["before"]["job"]["custom"] == ODD_NUMBERS
    assert "Infinity" not in written + quarantine + "".join(ledger)


def test_a_rerun_finds_the_quarantined_row_with_its_numbers_and_adds_no_copy(
    tmp_path: Path,
) -> None:
    row = {**sample_job(id="a"), "n": "#0"}
    path = tmp_path / "jobs.json"
    for _ in range(2):  # the second time: as after a crash between quarantine and replace
        path.write_text(_with_literals({"version": 1, "jobs": [sample_job(id="a"), row]}))
        doctor(path, fix=True, dm_scope="per-channel-peer", now=NOW)
    quarantine = (tmp_path / "jobs.json.quarantine.json").read_text("utf-8")
    assert len(_strict(quarantine)["quarantine"]) == 1 and quarantine.count("1e400") == 1
    # another number, even one with the same value as a double, is another row
    path.write_text(
        _with_literals({"version": 1, "jobs": [sample_job(id="a"), {**row, "n": "#1"}]})
    )
    doctor(path, fix=True, dm_scope="per-channel-peer", now=NOW)
    assert len(_strict((tmp_path / "jobs.json.quarantine.json").read_text())["quarantine"]) == 2


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(_JSON, st.sampled_from([2, None]))
def test_the_store_writer_writes_what_json_dumps_writes(value: Any, indent: int | None) -> None:
    expected = json.dumps(value, indent=indent, ensure_ascii=False)
    assert dump_json(value, indent=indent) == expected
    assert dump_json(load_json(expected), indent=indent) == expected  # read, written: the same


def test_the_store_writer_refuses_a_nan_it_did_not_read() -> None:
    with pytest.raises(ValueError, match="no JSON spelling"):
        dump_json({"x": [float("nan")]}, indent=2)


# --- rows with problems Rule 2 does not need solved: kept, warned about ----------------------


def test_problems_rule_2_does_not_read_are_warnings_and_the_job_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = [
        sample_job(id="flag", enabled="true", delivery={"mode": "none"}),
        sample_job(id="float", createdAtMs=1767250800000.5, delivery={"mode": "none"}),
        sample_job(id="weekly", schedule={"kind": "weekly"}, sessionTarget="isolated"),
    ]
    path = write_store(tmp_path / "jobs.json", jobs)
    before = path.read_bytes()
    code, out, err = cli(str(path), capsys=capsys)
    assert (code, err) == (0, "")  # nothing to migrate or quarantine
    assert "Nothing to migrate or quarantine" in out
    assert "Warnings: 3 job(s) kept as they are" in out
    assert "  jobs[0] flag: enabled: input should be a valid boolean" in out
    assert "  jobs[1] float: createdAtMs: input should be a valid integer" in out
    assert "  jobs[2] weekly: schedule: unknown kind 'weekly'" in out
    code, out, _ = cli(str(path), "--json", capsys=capsys)
    doc = json.loads(out)
    assert [(j["id"], j["action"], len(j["warnings"])) for j in doc["jobs"]] == [
        ("flag", "kept", 1),
        ("float", "kept", 1),
        ("weekly", "kept", 1),
    ]
    assert doc["summary"]["warned"] == 3 and doc["summary"]["quarantined"] == 0
    code, _, _ = cli(str(path), "--fix", capsys=capsys)
    assert code == 0 and path.read_bytes() == before and siblings(path) == []


def test_a_job_whose_delivery_cannot_be_read_is_kept_for_review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_store(tmp_path / "jobs.json", [sample_job(delivery={"mode": "email"})])
    code, out, _ = cli(str(path), "--fix", capsys=capsys)
    assert code == 0 and siblings(path) == []
    assert "kept (review)" in out and "check them by hand" in out
    assert "delivery.mode: must be one of 'announce', 'webhook' or 'none'" in out


# --- the real CLI -----------------------------------------------------------------------------


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers", "doctor", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_cli_end_to_end(store: Path) -> None:
    done = _run(str(store), "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["summary"]["migrated"] == 2
    done = _run(str(store), "--fix")
    assert done.returncode == 1, done.stderr
    done = _run(str(store), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["migrated"] == 0
    done = _run(str(store.parent / "missing.json"))
    assert done.returncode == 2 and "missing.json: no such file" in done.stderr


def test_doctor_is_listed_in_the_cli_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workers", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "doctor" in done.stdout and "Rule 2" in done.stdout
