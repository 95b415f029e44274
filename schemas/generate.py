"""Write the JSON Schema of every record to schemas/json/ (for connectors in other languages).

    python -m schemas.generate           # rewrite the files
    python -m schemas.generate --check   # exit 1 if any file is missing, stale or extra

The output is stable (sorted keys, two-space indent, trailing newline) so the files can be
committed and a test can tell when a model changed without regenerating them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from transcript_connector.records import RECORDS

JSON_DIR = Path(__file__).resolve().parent / "json"
SUFFIX = ".schema.json"
_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def render_all() -> dict[str, str]:
    """File name -> file text, for every record in the contract."""
    out: dict[str, str] = {}
    for name, model in RECORDS.items():
        schema = model.model_json_schema(by_alias=True, mode="validation")
        schema["$schema"] = _DIALECT
        schema["$id"] = name + SUFFIX
        out[name + SUFFIX] = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return out


def stale_files(directory: Path = JSON_DIR) -> list[str]:
    """Names of files that differ from what render_all() gives, are missing, or are extra."""
    wanted = render_all()
    problems = [
        name
        for name, text in wanted.items()
        if not (directory / name).is_file() or (directory / name).read_text("utf-8") != text
    ]
    if directory.is_dir():
        problems += sorted(p.name for p in directory.glob("*" + SUFFIX) if p.name not in wanted)
    return problems


def write_all(directory: Path = JSON_DIR) -> list[str]:
    """Write every schema file (removing ones no record produces); return the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = render_all()
    for old in directory.glob("*" + SUFFIX):
        if old.name not in wanted:
            old.unlink()
    for name, text in wanted.items():
        (directory / name).write_text(text, "utf-8")
    return sorted(wanted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schemas.generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if any file is stale")
    parser.add_argument("--dir", type=Path, default=JSON_DIR, help="output directory")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.dir)
        for name in stale:
            print(f"stale: {args.dir / name} (run `python -m schemas.generate`)", file=sys.stderr)
        return 1 if stale else 0
    for name in write_all(args.dir):
        print(args.dir / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
