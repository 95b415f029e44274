"""No traceback reaches a user: whatever a command did not foresee exits 2 with one line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import workers.cli as cli
import workers.commands.render as render_mod
from workers.cli import MAX_ERROR_CHARS, main
from workers.settings import SettingsError

ROOT = Path(__file__).resolve().parents[2]
RENDER = ["render", "--provider", "openai", "-"]


def _raising(exc: BaseException) -> Callable[[argparse.Namespace], int]:
    """A stand-in for a command's run."""

    def run(args: argparse.Namespace) -> int:
        raise exc

    return run


def test_an_unexpected_exception_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(render_mod, "run", _raising(RuntimeError("the store\nbroke")))
    assert main(RENDER) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "error: RuntimeError: the store broke\n")


def test_a_reason_the_project_gives_is_printed_as_it_is_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.commands.sink import SinkError

    monkeypatch.setattr(render_mod, "run", _raising(SinkError("var/t.db: not a sink database")))
    assert main(RENDER) == 2
    assert capsys.readouterr() == ("", "error: var/t.db: not a sink database\n")


def test_every_exception_the_project_defines_has_one_root() -> None:
    """One root (workers/core/errors.py): a shell tells the project's reasons from bugs by it.
    Private classes (a parser's internal signal, `_Constant`) are exempt."""
    import ast
    import importlib

    from workers.core.errors import OwnerError

    found = []
    for path in sorted((ROOT / "workers").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text("utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                cls = getattr(importlib.import_module(module), node.name)
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    found.append(cls)
    assert len(found) >= 15
    outside = [f"{c.__module__}.{c.__qualname__}" for c in found if not issubclass(c, OwnerError)]
    assert not outside, f"exceptions outside OwnerError: {outside}"


def test_a_long_message_is_clipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(render_mod, "run", _raising(ValueError("x" * 10_000)))
    assert main(RENDER) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ValueError: xxx") and err.endswith("…\n")
    assert len(err) <= len("error: ValueError: \n") + MAX_ERROR_CHARS
    assert err.count("\n") == 1


def test_a_recursion_error_is_an_exception_like_any_other(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(render_mod, "run", _raising(RecursionError("maximum recursion depth")))
    assert main(RENDER) == 2
    assert capsys.readouterr().err == "error: RecursionError: maximum recursion depth\n"


def test_a_command_module_that_fails_to_import_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(cli.COMMANDS, "render", ("workers.no_such_module", "gone"))
    assert main(RENDER) == 2
    assert capsys.readouterr().err.startswith("error: ModuleNotFoundError: No module named")


@pytest.mark.parametrize("code", [0, 1, 3, "bye"])
def test_system_exit_passes_through_unchanged(
    monkeypatch: pytest.MonkeyPatch, code: object
) -> None:
    # the worker runs faust, which exits through sys.exit; so does argparse on a usage error
    monkeypatch.setattr(render_mod, "run", _raising(SystemExit(code)))
    with pytest.raises(SystemExit) as exc:
        main(RENDER)
    assert exc.value.code == code
    with pytest.raises(SystemExit) as exc:
        main(["render", "--provider", "cohere", "-"])
    assert exc.value.code == 2


def test_settings_errors_and_ctrl_c_keep_their_own_handling(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(render_mod, "run", _raising(SettingsError("invalid environment: X")))
    assert main(RENDER) == 2
    assert capsys.readouterr().err == "error: invalid environment: X\n"
    monkeypatch.setattr(render_mod, "run", _raising(KeyboardInterrupt()))
    assert main(RENDER) == 130


@pytest.mark.parametrize(("var", "value", "says"), [
    ("KAFKA_BOOTSTRAP", "127.0.0.1:99999", "KAFKA_BOOTSTRAP: must be host:port[,host:port…] "
     "with a port from 1 to 65535; the value has a port above 65535"),
    ("TRANSCRIPT_PARTITIONS", "1e300", "TRANSCRIPT_PARTITIONS: must be a whole number from 1 "
     "to 10000; the value is above 10000"),
])
def test_a_setting_out_of_its_range_stops_audit_with_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], var: str, value: str,
    says: str,
) -> None:
    """Before, the port passed a digits check and the partition count had no upper bound:
    the clients were made and retried."""
    monkeypatch.setenv(var, value)
    assert main(["audit"]) == 2
    assert capsys.readouterr() == ("", f"error: invalid environment: {says}\n")


# --- real inputs that used to end in a RecursionError traceback (exit 1) --------------------


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers", *args],
        input=stdin.decode(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_doctor_on_a_10000_deep_store_exits_2_naming_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text('{"version": 1,\n"jobs": [' + "[" * 10_000 + "]" * 10_000 + "]}\n")
    done = _cli("doctor", str(path), "--fix")
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.startswith(f"doctor: {path}: not JSON: line 2, column ")
    assert done.stderr.rstrip().endswith("nested more than 200 levels deep")
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.json"]


def test_render_on_a_10000_deep_history_exits_2_naming_the_line() -> None:
    deep = "[" * 10_000 + "]" * 10_000
    call = {"id": "c", "name": "n", "arguments": '{"q": ' + deep + "}"}
    history = [
        {"role": "user", "text": "hi"},
        {"role": "assistant", "text": "", "tool_calls": [call]},
        {"role": "tool", "text": "r", "tool_call_id": "c"},
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in history)
    stdin += '{"role": "user", "text": "x", "blob": ' + deep + "}\n"
    done = _cli("render", "--provider", "anthropic", "-", stdin=stdin.encode())
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    first, second = done.stderr.splitlines()
    assert first == "render: line 2: tool_calls[0].arguments: nested more than 100 levels deep"
    assert second.startswith("render: line 4: nested too deeply (the limit is 200 levels)")
