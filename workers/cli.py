"""`transcript-owner …` entry point: parses arguments, hands each command to its module.

Command modules are imported lazily so that `replay` (no Kafka) never pays for faust's import.
Each module exposes `add_arguments(parser)` and `run(args) -> int` (the exit code).

No traceback reaches a user. A reason the project gives (an OwnerError, workers/core/errors.py:
settings, topics.yaml, the sink's database, …) prints `error: <reason>`; any other exception a
command did not handle prints one line, `error: <class>: <message>` (the message clipped); both
exit 2. Usage errors (argparse) and SystemExit (the worker: faust exits through it) pass
through unchanged; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from workers.core.errors import OwnerError

MAX_ERROR_CHARS = 300  # of an unexpected exception's message, on stderr

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "topics": ("workers.commands.topics", "make the cluster match topics.yaml or report drift"),
    "worker": ("workers.stream.worker", "run the stream processor (the transcript owner)"),
    "loadgen": ("workers.commands.loadgen",
                "publish realistic synthetic delivery confirmations"),
    "audit": ("workers.commands.audit",
              "replay the input topic and compare with the transcript topic"),
    "show": ("workers.commands.show", "print one session's transcript"),
    "replay": ("workers.commands.replay",
               "run JSON-lines input through the core offline; print outcomes"),
    "doctor": ("workers.commands.doctor", "migrate scheduled jobs to the two job modes (Rule 2)"),
    "render": ("workers.commands.render",
               "render a session's history as one provider family's request"),
    "forget": ("workers.commands.forget",
               "erase a session: tombstones, recorded in transcript.erasures"),
    "sink": ("workers.commands.sink",
             "materialise transcript.entries into a SQLite database, exactly once"),
    "plan": ("workers.commands.plan",
             "size a deployment: partitions, workers, state, restore and disk for a workload"),
    "repartition": ("workers.commands.repartition",
                    "move the deployment to more partitions (workers stopped; nothing lost)"),
}


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """Only the chosen command's module is imported (its arguments are its own business)."""
    parser = argparse.ArgumentParser(prog="transcript-owner", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        args = build_parser(command).parse_args(argv)
        module = importlib.import_module(args._module)
        return int(module.run(args) or 0)
    except OwnerError as exc:  # a reason the project names (the environment, a file, …)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except Exception as exc:  # a bug or an unforeseen input: one line, never a traceback
        print(f"error: {_unexpected(exc)}", file=sys.stderr)
        return 2


def _unexpected(exc: BaseException) -> str:
    """`<class>: <message>`, the message on one line and clipped to MAX_ERROR_CHARS."""
    message = " ".join(str(exc).split())
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


if __name__ == "__main__":
    raise SystemExit(main())
