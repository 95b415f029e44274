"""Provider replay: the hard cases of owner entries, per provider family, and the CLI.

Owner entries land after the chat's last assistant reply (adjacent assistant messages), at
the start of a history, or between a tool call and its result. Each case is rendered for
every family and compared, in a compact form, with what that family's API accepts.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schemas import PostedBy
from workers.commands.render import read_history
from workers.core.provider_replay import (
    CONTINUES,
    FAMILIES,
    RESET_NOTE,
    EmptyRequest,
    HistoryLine,
    InvalidHistory,
    ToolCall,
    attribution,
    mapped,
    pair_tool_results,
    problems,
    render,
    resolve_epochs,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "render"

JOB = '[posted by job "daily report" (id job-1)]\n'
SUB = '[posted by subagent "research" (id researcher, run run-7)]\n'


# --- builders -----------------------------------------------------------------------------


def user(text: str, epoch: int | None = None) -> HistoryLine:
    return HistoryLine(role="user", text=text, epoch=epoch)


def reply(text: str, epoch: int | None = None) -> HistoryLine:
    return HistoryLine(role="assistant", text=text, epoch=epoch)


def job_result(text: str, epoch: int | None = None) -> HistoryLine:
    poster = PostedBy(kind="job", id="job-1", name="daily report", run_id="run-1")
    return HistoryLine(role="assistant", text=text, posted_by=poster, epoch=epoch)


def sub_result(text: str) -> HistoryLine:
    poster = PostedBy(kind="subagent", id="researcher", name="research", run_id="run-7")
    return HistoryLine(role="assistant", text=text, posted_by=poster)


def agent_result(text: str) -> HistoryLine:
    return HistoryLine(role="assistant", text=text, posted_by=PostedBy(kind="agent", id="ops"))


def call(*ids: str, text: str = "") -> HistoryLine:
    calls = tuple(ToolCall(id=i, name="search", arguments={"q": i}) for i in ids)
    return HistoryLine(role="assistant", text=text, tool_calls=calls)


def tool(call_id: str, text: str) -> HistoryLine:
    return HistoryLine(role="tool", text=text, tool_call_id=call_id)


# --- a compact view of each family's request: [(role, (piece, ...)), ...] ------------------


def compact(family: str, request: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Text pieces as they are, `call:ID` for a tool call, `result:ID:TEXT` for a result."""
    if family == "gemini":
        return [
            (c["role"], tuple(_gemini_part(p) for p in c["parts"])) for c in request["contents"]
        ]
    out = []
    for m in request["messages"]:
        if family == "openai":
            if m["role"] == "tool":
                out.append(("tool", (f"result:{m['tool_call_id']}:{m['content']}",)))
                continue
            pieces = [m["content"]] if m["content"] is not None else []
            pieces += [f"call:{c['id']}" for c in m.get("tool_calls", ())]
            out.append((m["role"], tuple(pieces)))
        elif family == "anthropic":
            out.append((m["role"], tuple(_anthropic_block(b) for b in m["content"])))
        else:
            assert isinstance(m["content"], str)
            out.append((m["role"], (m["content"],)))
    return out


def _gemini_part(part: dict[str, Any]) -> str:
    if "functionCall" in part:
        return f"call:{part['functionCall']['id']}"
    if "functionResponse" in part:
        r = part["functionResponse"]
        return f"result:{r['id']}:{r['response']['output']}"
    return part["text"]


def _anthropic_block(block: dict[str, Any]) -> str:
    if block["type"] == "tool_use":
        return f"call:{block['id']}"
    if block["type"] == "tool_result":
        return f"result:{block['tool_use_id']}:{block.get('content', '')}"
    return block["text"]


def _strict_call(i: str) -> str:
    return f'[tool call {i}: search {{"q": "{i}"}}]'


def _strict_result(i: str, text: str) -> str:
    return f"[tool result {i}: search]\n{text}"


# --- the hard cases -----------------------------------------------------------------------

RESULT_AFTER_REPLY = [user("u1"), reply("a1"), job_result("r1")]
SEVERAL_RESULTS = [
    user("u1"),
    reply("a1"),
    job_result("r1"),
    sub_result("r2"),
    agent_result("r3"),
    user("u2"),
]
RESULT_BETWEEN_CALL_AND_RESULT = [
    user("u1"),
    call("c1", text="looking"),
    job_result("r1"),
    tool("c1", "found"),
    reply("a2"),
]
RESULTS_BETWEEN_PARALLEL_CALLS = [
    user("u1"),
    call("c1", "c2"),
    job_result("r1"),
    tool("c2", "two"),
    sub_result("r2"),
    tool("c1", "one"),
    reply("a2"),
]
STARTS_WITH_RESULT = [job_result("r1"), user("u1"), reply("a1")]
RESET = [
    user("u0", epoch=0),
    reply("a0"),
    job_result("r0", epoch=0),
    job_result("r1", epoch=1),
    user("u1"),
    reply("a1"),
]

CASES: dict[str, tuple[list[HistoryLine], dict[str, list[tuple[str, tuple[str, ...]]]]]] = {
    "result after an assistant reply": (
        RESULT_AFTER_REPLY,
        {
            "openai": [("user", ("u1",)), ("assistant", ("a1",)), ("assistant", (JOB + "r1",))],
            "anthropic": [("user", ("u1",)), ("assistant", ("a1", JOB + "r1"))],
            "gemini": [("user", ("u1",)), ("model", ("a1", JOB + "r1"))],
            "strict": [("user", ("u1",)), ("assistant", ("a1\n\n" + JOB + "r1",))],
        },
    ),
    "several results in a row": (
        SEVERAL_RESULTS,
        {
            "openai": [
                ("user", ("u1",)),
                ("assistant", ("a1",)),
                ("assistant", (JOB + "r1",)),
                ("assistant", (SUB + "r2",)),
                ("assistant", ("r3",)),
                ("user", ("u2",)),
            ],
            "anthropic": [
                ("user", ("u1",)),
                ("assistant", ("a1", JOB + "r1", SUB + "r2", "r3")),
                ("user", ("u2",)),
            ],
            "gemini": [
                ("user", ("u1",)),
                ("model", ("a1", JOB + "r1", SUB + "r2", "r3")),
                ("user", ("u2",)),
            ],
            "strict": [
                ("user", ("u1",)),
                ("assistant", ("\n\n".join(["a1", JOB + "r1", SUB + "r2", "r3"]),)),
                ("user", ("u2",)),
            ],
        },
    ),
    "a result between a tool call and its result": (
        RESULT_BETWEEN_CALL_AND_RESULT,
        {
            "openai": [
                ("user", ("u1",)),
                ("assistant", ("looking", "call:c1")),
                ("tool", ("result:c1:found",)),
                ("assistant", (JOB + "r1",)),
                ("assistant", ("a2",)),
            ],
            "anthropic": [
                ("user", ("u1",)),
                ("assistant", ("looking", "call:c1")),
                ("user", ("result:c1:found",)),
                ("assistant", (JOB + "r1", "a2")),
            ],
            "gemini": [
                ("user", ("u1",)),
                ("model", ("looking", "call:c1")),
                ("user", ("result:c1:found",)),
                ("model", (JOB + "r1", "a2")),
            ],
            "strict": [
                ("user", ("u1",)),
                ("assistant", ("looking\n" + _strict_call("c1"),)),
                ("user", (_strict_result("c1", "found"),)),
                ("assistant", (JOB + "r1\n\na2",)),
            ],
        },
    ),
    "results between parallel calls and their results": (
        RESULTS_BETWEEN_PARALLEL_CALLS,
        {
            "openai": [
                ("user", ("u1",)),
                ("assistant", ("call:c1", "call:c2")),
                ("tool", ("result:c2:two",)),
                ("tool", ("result:c1:one",)),
                ("assistant", (JOB + "r1",)),
                ("assistant", (SUB + "r2",)),
                ("assistant", ("a2",)),
            ],
            "anthropic": [
                ("user", ("u1",)),
                ("assistant", ("call:c1", "call:c2")),
                ("user", ("result:c2:two", "result:c1:one")),
                ("assistant", (JOB + "r1", SUB + "r2", "a2")),
            ],
            "gemini": [
                ("user", ("u1",)),
                ("model", ("call:c1", "call:c2")),
                ("user", ("result:c2:two", "result:c1:one")),
                ("model", (JOB + "r1", SUB + "r2", "a2")),
            ],
            "strict": [
                ("user", ("u1",)),
                ("assistant", (_strict_call("c1") + "\n" + _strict_call("c2"),)),
                ("user", (_strict_result("c2", "two") + "\n\n" + _strict_result("c1", "one"),)),
                ("assistant", ("\n\n".join([JOB + "r1", SUB + "r2", "a2"]),)),
            ],
        },
    ),
    "history starting with a result": (
        STARTS_WITH_RESULT,
        {
            "openai": [("assistant", (JOB + "r1",)), ("user", ("u1",)), ("assistant", ("a1",))],
            "anthropic": [
                ("user", (CONTINUES,)),
                ("assistant", (JOB + "r1",)),
                ("user", ("u1",)),
                ("assistant", ("a1",)),
            ],
            "gemini": [
                ("user", (CONTINUES,)),
                ("model", (JOB + "r1",)),
                ("user", ("u1",)),
                ("model", ("a1",)),
            ],
            "strict": [
                ("user", (CONTINUES,)),
                ("assistant", (JOB + "r1",)),
                ("user", ("u1",)),
                ("assistant", ("a1",)),
            ],
        },
    ),
    "reset epochs: only the latest by default": (
        RESET,
        {
            "openai": [("assistant", (JOB + "r1",)), ("user", ("u1",)), ("assistant", ("a1",))],
            "anthropic": [
                ("user", (CONTINUES,)),
                ("assistant", (JOB + "r1",)),
                ("user", ("u1",)),
                ("assistant", ("a1",)),
            ],
            "gemini": [
                ("user", (CONTINUES,)),
                ("model", (JOB + "r1",)),
                ("user", ("u1",)),
                ("model", ("a1",)),
            ],
            "strict": [
                ("user", (CONTINUES,)),
                ("assistant", (JOB + "r1",)),
                ("user", ("u1",)),
                ("assistant", ("a1",)),
            ],
        },
    ),
}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", CASES)
def test_hard_cases(case: str, family: str) -> None:
    lines, expected = CASES[case]
    assert compact(family, render(lines, family)) == expected[family]  # type: ignore[arg-type]


@pytest.mark.parametrize("family", FAMILIES)
def test_all_epochs_marks_each_reset(family: str) -> None:
    got = compact(family, render(RESET, family, all_epochs=True))  # type: ignore[arg-type]
    assistant = "model" if family == "gemini" else "assistant"
    if family == "openai":
        assert got == [
            ("user", ("u0",)),
            ("assistant", ("a0",)),
            ("assistant", (JOB + "r0",)),
            ("user", (RESET_NOTE,)),
            ("assistant", (JOB + "r1",)),
            ("user", ("u1",)),
            ("assistant", ("a1",)),
        ]
    elif family == "strict":
        assert got == [
            ("user", ("u0",)),
            ("assistant", ("a0\n\n" + JOB + "r0",)),
            ("user", (RESET_NOTE,)),
            ("assistant", (JOB + "r1",)),
            ("user", ("u1",)),
            ("assistant", ("a1",)),
        ]
    else:
        assert got == [
            ("user", ("u0",)),
            (assistant, ("a0", JOB + "r0")),
            ("user", (RESET_NOTE,)),
            (assistant, (JOB + "r1",)),
            ("user", ("u1",)),
            (assistant, ("a1",)),
        ]


@pytest.mark.parametrize("family", FAMILIES)
def test_golden_session(family: str) -> None:
    """A realistic session (entries as they come from Kafka) in each family's full shape."""
    with (DATA / "session.jsonl").open("rb") as f:
        numbered, errors = read_history(f)
    assert errors == []
    expected = json.loads((DATA / f"session.{family}.json").read_text("utf-8"))
    assert render([line for _, line in numbered], family) == expected  # type: ignore[arg-type]


# --- epochs -------------------------------------------------------------------------------


def test_lines_without_an_epoch_inherit_it() -> None:
    lines = [user("u"), reply("a"), job_result("r", epoch=2), user("u2"), job_result("r3", epoch=3)]
    assert resolve_epochs(lines) == (2, 2, 2, 2, 3)
    assert resolve_epochs([user("u"), reply("a")]) == (0, 0)


def test_the_latest_epoch_alone_keeps_lines_before_its_first_entry() -> None:
    """Gateway lines carry no epoch; the entries of the epoch they sit in say which it is."""
    lines = [user("u", epoch=4), reply("a"), job_result("r", epoch=4)]
    assert compact("openai", render(lines, "openai")) == [
        ("user", ("u",)),
        ("assistant", ("a",)),
        ("assistant", (JOB + "r",)),
    ]


# --- attribution --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("poster", "tag"),
    [
        (PostedBy(kind="job", id="job-1", name="daily report"), JOB.strip()),
        (PostedBy(kind="job", id="job-1", run_id="r"), "[posted by job (id job-1)]"),
        (
            PostedBy(kind="job", id="j", name='say "hi"\nnow'),
            '[posted by job "say \\"hi\\"\\nnow" (id j)]',
        ),
        (
            PostedBy(kind="subagent", id="researcher", name="research", run_id="run-7"),
            SUB.strip(),
        ),
        (PostedBy(kind="subagent", id="researcher"), "[posted by subagent (id researcher)]"),
        (PostedBy(kind="agent", id="ops"), None),
        (None, None),
    ],
)
def test_attribution(poster: PostedBy | None, tag: str | None) -> None:
    assert attribution(poster) == tag


def test_media_are_named_after_the_text() -> None:
    line = HistoryLine.model_validate(
        {"role": "assistant", "text": "", "media": [{"kind": "image", "name": "chart.png"}]}
    )
    assert render([user("u"), line], "openai")["messages"][1]["content"] == (
        '[attached image "chart.png"]'
    )


# --- long histories: linear work, the same order -----------------------------------------


class _Counted:
    """A history line that counts every attribute read (pair_tool_results duck-types it)."""

    reads = 0

    def __init__(self, line: HistoryLine) -> None:
        self.line = line

    def __getattr__(self, name: str) -> Any:
        _Counted.reads += 1
        return getattr(self.line, name)


def _pairs(n: int) -> list[HistoryLine]:
    """n tool episodes, each with an owner entry between the call and its result."""
    out = [user("go")]
    for i in range(n):
        out += [call(f"c{i}"), job_result(f"r{i}"), tool(f"c{i}", f"found {i}")]
    return out


def _paired(n: int) -> list[HistoryLine]:
    """_pairs(n) as the tool-pair rule arranges it: each result right after its call."""
    out = [user("go")]
    for i in range(n):
        out += [call(f"c{i}"), tool(f"c{i}", f"found {i}"), job_result(f"r{i}")]
    return out


@pytest.mark.parametrize("n", [10, 1_000, 5_000])
def test_pairing_tool_results_reads_each_line_a_bounded_number_of_times(n: int) -> None:
    # Deterministic stand-in for "linear": the work per line does not grow with the history.
    # Before, every call scanned every later line twice (10k pairs took 16 s).
    lines = [_Counted(line) for line in _pairs(n)]
    _Counted.reads = 0
    arranged = pair_tool_results(lines)  # type: ignore[arg-type]
    assert _Counted.reads <= 4 * len(lines)
    assert [x.line for x in arranged] == _paired(n)  # type: ignore[attr-defined]


@pytest.mark.parametrize("family", FAMILIES)
def test_ten_thousand_tool_pairs_render_each_result_after_its_call(family: str) -> None:
    n = 10_000
    got = compact(family, render(_pairs(n), family))  # type: ignore[arg-type]
    assert got == compact(family, render(_paired(n), family))  # type: ignore[arg-type]
    texts = [" ".join(pieces) for _, pieces in got]
    call_at = {k: i for i, t in enumerate(texts) for k in re.findall(r"call[: ]c(\d+)", t)}
    assert len(call_at) == n
    for k in map(str, (0, n // 2, n - 1)):
        assert re.search(rf"result[: ]c{k}\b", texts[call_at[k] + 1]), texts[call_at[k] + 1]


def test_a_call_id_reused_after_a_reset_pairs_with_its_own_epochs_call() -> None:
    # Call ids are unique per epoch only: a result answers the latest call with its id.
    def calls(name: str, epoch: int) -> HistoryLine:
        made = (ToolCall(id="c1", name=name),)
        return HistoryLine(role="assistant", text=f"calls {name}", tool_calls=made, epoch=epoch)

    lines = [
        user("u0", epoch=0),
        calls("search", 0),
        tool("c1", "old"),
        user("u1", epoch=1),
        calls("fetch", 1),
        job_result("r1"),
        tool("c1", "new"),
    ]
    assert not problems(lines)
    order = [x.text for x in pair_tool_results(lines)]
    assert order == ["u0", "calls search", "old", "u1", "calls fetch", "new", "r1"]
    # one request holds an id once: the latest epoch keeps c1, epoch 0's is mapped
    old = mapped("c1", "0:c1")
    assert re.fullmatch(r"c1_[0-9a-f]{8}", old)
    strict = [m["content"] for m in render(lines, "strict", all_epochs=True)["messages"]]
    assert strict[1:4] == [
        f"calls search\n[tool call {old}: search {{}}]",
        f"[tool result {old}: search]\nold\n\n{RESET_NOTE}\n\nu1",
        "calls fetch\n[tool call c1: fetch {}]",
    ]
    assert strict[4].startswith("[tool result c1: fetch]\nnew")
    gemini = render(lines, "gemini", all_epochs=True)["contents"]
    responses = [
        p["functionResponse"] for c in gemini for p in c["parts"] if "functionResponse" in p
    ]
    assert [(r["name"], r["response"]["output"]) for r in responses] == [
        ("search", "old"),
        ("fetch", "new"),
    ]


# --- invalid input ------------------------------------------------------------------------


_CALL = (
    '{"role": "assistant", "text": "", "tool_calls": [{"id": "c", "name": "n", "arguments": %s}]}'
)


def _errors(text: str) -> list[str]:
    return read_history(io.BytesIO(text.encode()))[1]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("{not json", "line 2: not JSON"),
        ("[1]", "line 2: not a JSON object"),
        ('{"text": "x"}', "line 2: role: field required"),
        ('{"role": "system", "text": "x"}', "line 2: role: must be one of"),
        ('{"role": "user"}', "line 2: text: field required"),
        ('{"role": "tool", "text": "x"}', "line 2: tool_call_id: required on a tool line"),
        (
            '{"role": "user", "text": "x", "tool_call_id": "c"}',
            "line 2: tool_call_id: only a tool line has one",
        ),
        (
            '{"role": "user", "text": "x", "tool_calls": [{"id": "c", "name": "n"}]}',
            "line 2: tool_calls: only an assistant line makes tool calls",
        ),
        (
            '{"role": "assistant", "text": "", "tool_calls": [{"id": "c", "name": "n",'
            ' "arguments": "[1]"}]}',
            "line 2: tool_calls[0].arguments: must be a JSON object",
        ),
        (
            '{"role": "user", "text": "x", "posted_by": {"kind": "job", "id": "j"}}',
            "line 2: posted_by: only an assistant line",
        ),
        (
            '{"role": "assistant", "text": "x", "posted_by": {"kind": "cron", "id": "j"}}',
            "line 2: posted_by.kind: must be one of",
        ),
        ('{"role": "user", "text": "x", "epoch": -1}', "line 2: epoch: input should be greater"),
        ('{"schema": "delivery-confirmation/1"}', "line 2: unknown schema"),
        ('{"schema": "transcript-entry/1", "text": "x"}', "line 2: session_key: field required"),
        # JSON has no NaN or Infinity; a provider cannot read them back (nor 1e400, a double's
        # infinity); the path stops at the tool's arguments (below is the tool's input)
        (_CALL % '{"q": {"deep": [1, NaN]}}', "line 2: tool_calls[0].arguments: NaN is not JSON"),
        (
            _CALL % json.dumps('{"q": [Infinity]}'),
            "line 2: tool_calls[0].arguments: holds Infinity, which is not JSON",
        ),
        (_CALL % '{"q": 1e400}', "line 2: tool_calls[0].arguments: holds a number that is not"),
        (_CALL % json.dumps('{"q": -1e999}'), "line 2: tool_calls[0].arguments: holds a number"),
        ('{"role": "user", "text": "x", "epoch": NaN}', "line 2: epoch: NaN is not JSON"),
        (
            '{"role": "user", "text": "x", "ignored": [0, {"k": -Infinity}]}',
            "line 2: ignored[1].k: -Infinity is not JSON",
        ),
        ('{"schema": "transcript-entry/1", "x": Infinity}', "line 2: x: Infinity is not JSON"),
        # nesting: the line itself (pydantic's limit), and arguments given as text
        (
            '{"role": "user", "text": "x", "a": ' + "[" * 10_000 + "]" * 10_000 + "}",
            "line 2: nested too deeply",
        ),
        (
            _CALL % json.dumps('{"q": ' + "[" * 10_000 + "]" * 10_000 + "}"),
            "line 2: tool_calls[0].arguments: nested more than 100 levels deep",
        ),
        (
            _CALL % ('{"q": ' + "[" * 150 + "]" * 150 + "}"),
            "line 2: tool_calls[0].arguments: nested more than 100 levels deep",
        ),
    ],
)
def test_invalid_lines_name_the_line_and_field(line: str, error: str) -> None:
    errors = _errors('{"role": "user", "text": "ok"}\n' + line + "\n")
    assert len(errors) == 1
    assert errors[0].startswith(error), errors


@pytest.mark.parametrize(
    ("history", "error"),
    [
        ('{"role": "tool", "text": "x", "tool_call_id": "c1"}', "line 1: tool_call_id: no earlier"),
        (
            '{"role": "assistant", "text": "", "tool_calls": [{"id": "c1", "name": "n"}]}\n'
            '{"role": "assistant", "text": "r"}',
            "line 1: tool_calls[0].id: no tool result for call 'c1'",
        ),
        (
            '{"role": "assistant", "text": "", "tool_calls": [{"id": "c1", "name": "n"}]}\n'
            '{"role": "tool", "text": "x", "tool_call_id": "c1"}\n'
            '{"role": "tool", "text": "x", "tool_call_id": "c1"}',
            "line 3: tool_call_id: call 'c1' has a result",
        ),
        (
            '{"role": "assistant", "text": "", "tool_calls": [{"id": "c1", "name": "n"},'
            ' {"id": "c1", "name": "n"}]}\n'
            '{"role": "tool", "text": "x", "tool_call_id": "c1"}',
            "line 1: tool_calls[1].id: tool call id 'c1' used twice",
        ),
        (
            '{"role": "user", "text": "x", "epoch": 2}\n\n'
            '{"role": "user", "text": "y", "epoch": 1}',
            "line 3: epoch: goes back from 2 to 1",
        ),
        (
            '{"role": "assistant", "text": "", "tool_calls": [{"id": "c1", "name": "n"}],'
            ' "epoch": 0}\n'
            '{"role": "tool", "text": "x", "tool_call_id": "c1", "epoch": 1}',
            "line 1: tool_calls[0].id: no tool result for call 'c1' follows in its epoch",
        ),
    ],
)
def test_inconsistent_histories_name_the_line_and_field(history: str, error: str) -> None:
    errors = _errors(history + "\n")
    assert errors and errors[0].startswith(error), errors


def test_render_refuses_an_inconsistent_history() -> None:
    assert problems([tool("c1", "x")])
    with pytest.raises(InvalidHistory):
        render([tool("c1", "x")], "openai")


def test_errors_never_show_message_text() -> None:
    errors = _errors('{"role": "tool", "text": "SECRET"}\n{"role": 1, "text": "SECRET"}\n')
    assert len(errors) == 2 and not any("SECRET" in e for e in errors)


# --- the command --------------------------------------------------------------------------


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "workers", "render", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_cli_renders_a_file_for_a_strict_template() -> None:
    done = _cli("--provider", "strict", str(DATA / "session.jsonl"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads((DATA / "session.strict.json").read_bytes())
    roles = [m["role"] for m in json.loads(done.stdout)["messages"]]
    assert roles == ["user", "assistant"] * (len(roles) // 2)


def test_cli_reads_stdin_and_exits_2_on_invalid_input() -> None:
    good = _cli("--provider", "gemini", "--all-epochs", "-", stdin=b'{"role":"user","text":"hi"}\n')
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout) == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    bad = _cli("--provider", "strict", "-", stdin=b'{"role":"user","text":"hi"}\n{"role":"x"}\n')
    assert bad.returncode == 2 and bad.stdout == b""
    assert bad.stderr.decode().startswith("render: line 2: role: must be one of")


def test_cli_missing_file_and_unknown_family_exit_2() -> None:
    assert _cli("--provider", "strict", str(DATA / "nope.jsonl")).returncode == 2
    assert _cli("--provider", "cohere", str(DATA / "session.jsonl")).returncode == 2


def _strict_json(data: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in the output: not JSON")

    return json.loads(data, parse_constant=refuse)


def test_cli_output_is_strict_json_and_nan_or_deep_arguments_exit_2() -> None:
    result = b'{"role": "tool", "text": "r", "tool_call_id": "c"}\n'
    edge = (_CALL % '{"big": 1.7976931348623157e308, "small": -5e-324, "n": [1, 2]}').encode()
    for family in FAMILIES:
        done = _cli("--provider", family, "-", stdin=edge + b"\n" + result)
        assert done.returncode == 0, done.stderr
        assert "1.7976931348623157e+308" in json.dumps(_strict_json(done.stdout))
    for bad in (
        _CALL % '{"q": NaN}',
        _CALL % '{"q": 1e400}',
        _CALL % json.dumps('{"q": ' + "[" * 10_000 + "]" * 10_000 + "}"),
    ):
        done = _cli("--provider", "anthropic", "-", stdin=bad.encode() + b"\n" + result)
        assert (done.returncode, done.stdout) == (2, b""), done.stderr
        assert done.stderr.decode().startswith("render: line 1: tool_calls[0].arguments: ")
        assert "Traceback" not in done.stderr.decode()


# --- what the providers' servers refuse (issue 42, items 8-11) -----------------------------


def _tool_ids(family: str, request: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(call ids, result ids) in request order, in the family's own shape."""
    calls: list[str] = []
    results: list[str] = []
    if family == "gemini":
        for c in request["contents"]:
            calls += [p["functionCall"]["id"] for p in c["parts"] if "functionCall" in p]
            results += [p["functionResponse"]["id"] for p in c["parts"] if "functionResponse" in p]
    elif family == "anthropic":
        for m in request["messages"]:
            calls += [b["id"] for b in m["content"] if b["type"] == "tool_use"]
            results += [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"]
    elif family == "openai":
        for m in request["messages"]:
            calls += [c["id"] for c in m.get("tool_calls", ())]
            results += [m["tool_call_id"]] if m["role"] == "tool" else []
    else:
        text = "\n".join(m["content"] for m in request["messages"])
        calls = re.findall(r"^\[tool call (\S+): ", text, re.M)
        results = re.findall(r"^\[tool result (\S+): ", text, re.M)
    return calls, results


REUSED_AFTER_RESET = [
    user("u0", epoch=0),
    call("c1", "c2", text="two calls"),
    tool("c2", "old two"),
    tool("c1", "old one"),
    user("u1", epoch=1),
    call("c1", text="again"),
    tool("c1", "new one"),
]


@pytest.mark.parametrize("family", FAMILIES)
def test_all_epochs_makes_a_reused_tool_call_id_unique_within_the_request(family: str) -> None:
    # item 8: ids are unique per epoch only; one request must not hold one twice ("tool_use
    # ids must be unique"). The latest epoch keeps its ids, so they match the default render.
    request = render(REUSED_AFTER_RESET, family, all_epochs=True)  # type: ignore[arg-type]
    calls, results = _tool_ids(family, request)
    assert len(calls) == 3 and len(set(calls)) == 3, calls
    assert sorted(results) == sorted(calls)
    assert calls[2] == "c1"  # the latest epoch's own id
    assert calls[:2] != ["c1", "c2"]
    assert _tool_ids(family, render(REUSED_AFTER_RESET, family))[0] == ["c1"]  # type: ignore[arg-type]
    # pairing kept: each result still carries its own call's text
    got = compact(family, request)
    if family != "strict":
        pieces = [p for _, ps in got for p in ps]
        for i, old in ((calls[0], "old one"), (calls[1], "old two"), ("c1", "new one")):
            assert any(p in (f"result:{i}:{old}",) for p in pieces), (i, pieces)
    assert render(REUSED_AFTER_RESET, family, all_epochs=True) == request  # type: ignore[arg-type]


def test_gemini_keeps_user_text_out_of_the_function_response_turn() -> None:
    # item 9: Vertex AI refuses a Content that mixes functionResponse with any other part
    lines = [user("u1"), call("c1", text="looking"), user("any news?"), tool("c1", "found")]
    assert compact("gemini", render(lines, "gemini")) == [
        ("user", ("u1",)),
        ("model", ("looking", "call:c1")),
        ("user", ("result:c1:found",)),
        ("user", ("any news?",)),
    ]
    with_reset = [*lines, user("fresh", epoch=1)]
    contents = render(with_reset, "gemini", all_epochs=True)["contents"]
    for content in contents:
        kinds = {"functionResponse" in p for p in content["parts"]}
        assert len(kinds) == 1, content


@pytest.mark.parametrize("family", ["anthropic", "strict"])
def test_whitespace_only_text_makes_no_block_and_the_final_assistant_text_is_trimmed(
    family: str,
) -> None:
    # item 10: Anthropic refuses a whitespace-only text block ("text content blocks must
    # contain non-whitespace text") and a final assistant text ending in whitespace
    lines = [user("  \n"), user("u1"), call("c1", text=" \t"), tool("c1", " "), reply("done \n ")]
    got = compact(family, render(lines, family))  # type: ignore[arg-type]
    if family == "anthropic":
        assert got == [
            ("user", ("u1",)),
            ("assistant", ("call:c1",)),
            ("user", ("result:c1:",)),
            ("assistant", ("done",)),
        ]
        result = render(lines, "anthropic")["messages"][2]["content"][0]
        assert "content" not in result
    else:
        assert got == [
            ("user", ("u1",)),
            ("assistant", (_strict_call("c1"),)),
            ("user", ("[tool result c1: search]",)),
            ("assistant", ("done",)),
        ]
    # only the final assistant text: an earlier one keeps its whitespace
    kept = compact(family, render([user("u"), reply("a \n"), user("v"), reply("b ")], family))  # type: ignore[arg-type]
    assert kept[1] == ("assistant", ("a \n",)) and kept[3] == ("assistant", ("b",))


ODD_IDS = {
    "anthropic": ["toolu.01:x", "call/ü", "a" * 20],
    "openai": ["x" * 41, "call_" + "9" * 60, "ok.id:1"],
}


def _odd_history(ids: list[str], names: list[str]) -> list[HistoryLine]:
    out = [user("go")]
    for i, name in zip(ids, names, strict=True):
        out.append(HistoryLine(role="assistant", text="", tool_calls=(ToolCall(id=i, name=name),)))
        out.append(tool(i, f"result of {i}"))
    return out


@pytest.mark.parametrize("family", ["anthropic", "openai"])
def test_tool_ids_and_names_are_mapped_to_the_providers_patterns(family: str) -> None:
    # item 10: Anthropic ids ^[a-zA-Z0-9_-]+$, OpenAI ids at most 40 characters; names
    # ^[a-zA-Z0-9_-]{1,64}$ for both. Mapped deterministically, a call and its result alike,
    # two different ids or names never to one.
    ids = ODD_IDS[family]
    names = ["mcp.search", "ns:tool", "n" * 70]
    lines = _odd_history(ids, names)
    request = render(lines, family)  # type: ignore[arg-type]
    calls, results = _tool_ids(family, request)
    assert calls == results and len(set(calls)) == len(ids)
    pattern = r"[a-zA-Z0-9_-]+" if family == "anthropic" else r".{1,40}"
    assert all(re.fullmatch(pattern, i) for i in calls), calls
    if family == "anthropic":
        assert calls[2] == "a" * 20  # a valid id is kept
        got_names = [
            b["name"] for m in request["messages"] for b in m["content"] if b["type"] == "tool_use"
        ]
    else:
        got_names = [
            c["function"]["name"] for m in request["messages"] for c in m.get("tool_calls", ())
        ]
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in got_names), got_names
    assert len(set(got_names)) == 3
    assert got_names[0].startswith("mcp_search_")
    assert render(lines, family) == request  # type: ignore[arg-type]
    # a mapped id never takes another call's id, even one spelled like the mapping
    taken = calls[0]
    clash = _odd_history([ids[0], taken], ["a", "b"])
    clashed, _ = _tool_ids(family, render(clash, family))  # type: ignore[arg-type]
    assert clashed[1] == taken and clashed[0] != taken


def test_an_empty_request_is_refused_for_every_family() -> None:
    # item 10: google-genai refuses to send {"contents": []}; OpenAI and Anthropic refuse an
    # empty `messages` as well
    for family in FAMILIES:
        with pytest.raises(EmptyRequest, match="nothing to render"):
            render([], family)
    for family in ("anthropic", "gemini", "strict"):
        with pytest.raises(EmptyRequest):
            render([user(" "), reply("")], family)
    done = _cli("--provider", "gemini", "-", stdin=b"\n")
    assert (done.returncode, done.stdout) == (2, b""), done.stderr
    assert done.stderr.decode().startswith("render: nothing to render")
    assert len(done.stderr.decode().splitlines()) == 1


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            '{"role": "assistant", "text": "x", "posted_by": {"kind": "subagent", "id": "r",'
            ' "label": "research"}}',
            "line 2: posted_by.label: unknown field",
        ),
        (
            '{"role": "assistant", "text": "", "tool_calls": [{"id": "c", "name": "n",'
            ' "args": {"q": 1}}]}',
            "line 2: tool_calls[0].args: unknown field",
        ),
    ],
)
def test_an_unknown_field_in_posted_by_or_a_tool_call_is_refused(line: str, error: str) -> None:
    # item 11: `label` for a sub-agent's name (or `args` for arguments) was silently lost
    errors = _errors('{"role": "user", "text": "ok"}\n' + line + "\n")
    assert errors and errors[0].startswith(error), errors
