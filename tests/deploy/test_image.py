"""The OCI image (deploy/container, `make image`): its config is what the Containerfile says,
and it holds the same program as the venv: `replay` prints the same bytes, and `topics apply`
plus the worker, both from the image, write on the real broker what replay says; SIGTERM
stops the worker cleanly (exit 0) through the entrypoint (tini), which also passes it on as
the PID 1 of a PID namespace, as under a container runtime.

`make image` (the base made by mmdebstrap once, then buildah's layer cache) is run once per
module. Containers run with `buildah run --isolation chroot`, which shares the host network
(the broker on 127.0.0.1) and PID namespace, so the test finds and signals their processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import delete_topics
from tests.integration.harness import Collector, poll_until, replay_entries, without_written_at
from workers.compiled import MODULES
from workers.core.outputs import CONFIRMATIONS, ENTRIES
from workers.kafka_io import publish
from workers.scenario import steps
from workers.settings import kafka_settings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STATE = "/var/lib/transcript-owner"
UID = 10001
ENTRYPOINT = ["/usr/bin/tini", "-s", "--", "transcript-owner"]
WRITTEN_AT = "2026-05-01T13:00:00+00:00"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def image() -> str:
    """`make image` (image-tools first: buildah and mmdebstrap are installed when missing)."""
    began = time.monotonic()
    done = subprocess.run(["make", "-s", "image"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    names = re.findall(r"^image: (\S+) (.+)$", done.stdout, re.M)
    assert names, done.stdout[-2000:]
    name, size = names[-1]
    assert name.endswith(f":{VERSION}")
    print(f"\nmake image: {name} {size} in {time.monotonic() - began:.0f}s")
    return name


@pytest.fixture(scope="module")
def config(image: str) -> dict:
    done = subprocess.run(["buildah", "inspect", "--type", "image", image], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)["OCIv1"]["config"]


@pytest.fixture
def container(image: str) -> Iterator[str]:
    """A working container of the image; removed after (its volume directory with it)."""
    name = f"transcript-owner-test-{uuid.uuid4().hex[:10]}"
    subprocess.run(["buildah", "from", "--quiet", "--name", name, image], check=True,
                   capture_output=True)
    yield name
    subprocess.run(["buildah", "umount", name], capture_output=True)
    subprocess.run(["buildah", "rm", name], capture_output=True)


def run_args(container: str, env: dict[str, str] | None = None) -> list[str]:
    args = ["buildah", "run", "--isolation", "chroot", "--network", "host"]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    return [*args, container, "--"]


def run_in(container: str, *cmd: str, env: dict[str, str] | None = None,
           input: bytes | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*run_args(container, env), *cmd], input=input, capture_output=True,
                          timeout=timeout)


def descendants(root: int) -> list[int]:
    """`root` and every process below it (from /proc), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo += sorted(children.get(pid, []))
    return found


def exe_name(pid: int) -> str:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return ""


def process_named(root: int, name: str, timeout: float = 30) -> int:
    """The pid of the process below `root` whose executable is `name` (e.g. tini)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [p for p in descendants(root) if exe_name(p) == name]
        if pids:
            return pids[0]
        time.sleep(0.1)
    raise AssertionError(f"no {name} process below {root}: "
                         f"{[(p, exe_name(p)) for p in descendants(root)]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:  # noqa: S310 (loopback only)
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


class ImageWorker:
    """`buildah run … <entrypoint> <cmd>` of the image; quacks like harness.WorkerProcess."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(args, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def kill(self) -> None:
        for pid in reversed(descendants(self.proc.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)


def scenario_lines() -> list[bytes]:
    return [s.value for s in steps("img1", datetime(2026, 5, 1, 12, 0, tzinfo=UTC))]


def test_config_is_non_root_exec_form_with_volume_and_port(config, container):
    assert config["Entrypoint"] == ENTRYPOINT  # exec form: no shell between tini and the runtime
    assert config["Cmd"] == ["worker"]
    assert config["User"] == f"{UID}:{UID}"
    assert STATE in config["Volumes"]
    assert "6066/tcp" in config["ExposedPorts"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["TRANSCRIPT_STATE_DIR"] == STATE
    assert (env["TRANSCRIPT_HTTP_HOST"], env["TRANSCRIPT_HTTP_PORT"]) == ("0.0.0.0", "6066")
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.title"] == "transcript-owner"
    assert "org.opencontainers.image.source" in labels

    done = run_in(container, "sh", "-c",
                  f"id -u; stat -c '%u %g' {STATE}; test -w {STATE} && echo writable; "
                  "python3 -c 'import pytest' 2>/dev/null || echo no-dev-extras; "
                  "command -v pip || echo no-pip")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split("\n")[:5] == [
        str(UID), f"{UID} {UID}", "writable", "no-dev-extras", "no-pip"]


def test_replay_in_the_image_prints_what_the_venv_prints(container):
    lines = b"\n".join(scenario_lines()) + b"\n\nnot json\n"
    args = ("replay", "-", "--written-at", WRITTEN_AT)
    in_image = run_in(container, "transcript-owner", *args, input=lines)
    assert in_image.returncode == 0, in_image.stderr.decode()
    from_venv = subprocess.run([sys.executable, "-m", "workers", *args], cwd=ROOT, input=lines,
                               capture_output=True, timeout=120, check=True)
    assert in_image.stdout == from_venv.stdout
    assert in_image.stdout.count(b"\n") == len(lines.splitlines()) - 1  # the blank is skipped
    assert in_image.stderr.splitlines()[-1] == from_venv.stderr.splitlines()[-1]  # the counts


@pytest.mark.kafka
def test_topics_and_worker_from_the_image_write_what_replay_says(
        config, container, env, kafka_bootstrap, tmp_path):
    prefix = env["TRANSCRIPT_TOPIC_PREFIX"]
    http_port = free_port()
    image_env = {
        "KAFKA_BOOTSTRAP": kafka_bootstrap, "TRANSCRIPT_TOPIC_PREFIX": prefix,
        "TRANSCRIPT_SESSION_TIMEOUT_S": "6",
        # the image listens on 0.0.0.0:6066; on the host's network, loopback and a free port
        "TRANSCRIPT_HTTP_HOST": "127.0.0.1", "TRANSCRIPT_HTTP_PORT": str(http_port),
    }
    worker = None
    try:
        # topics.yaml comes with the installed package: no --file
        done = run_in(container, "transcript-owner", "topics", "apply", env=image_env)
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
        assert f"created {prefix}{ENTRIES}" in done.stdout.decode()

        ks = kafka_settings(env)
        scenario = steps("img2", datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
        publish(ks, ks.topic(CONFIRMATIONS), [(s.key, s.value) for s in scenario], 8)
        expected = replay_entries([s.value for s in scenario], env)
        assert len(expected) == sum(s.expect == "written" for s in scenario)

        # the image's own entrypoint and command
        worker = ImageWorker([*run_args(container, image_env), *config["Entrypoint"],
                              *config["Cmd"]], tmp_path / "worker.log")
        entries = Collector(ks, ks.topic(ENTRIES))
        try:
            entries.wait_for(lambda r: len(r) >= len(expected), 120, worker)
            key = lambda e: (e["session_key"], e["seq"])  # noqa: E731
            assert without_written_at(sorted(entries.values(), key=key)) == \
                without_written_at(sorted(expected, key=key))
        finally:
            entries.close()
        base = f"http://127.0.0.1:{http_port}"
        poll_until(lambda: http_status(f"{base}/readyz") == 200, 60, [worker], "/readyz 200")
        assert http_status(f"{base}/livez") == 200

        # SIGTERM to the entrypoint, as a runtime stops a container (`buildah run` itself
        # would kill its child at once, so it is not the one signalled)
        tini = process_named(worker.proc.pid, "tini")
        python = [p for p in descendants(tini) if exe_name(p).startswith("python")]
        assert python, descendants(tini)
        cmdline = Path(f"/proc/{python[0]}/cmdline").read_bytes().split(b"\0")
        assert b"worker" in cmdline and any(a.endswith(b"transcript-owner") for a in cmdline)
        uids = re.search(r"^Uid:\s+(.*)$", Path(f"/proc/{python[0]}/status").read_text(), re.M)
        assert uids and set(uids.group(1).split()) == {str(UID)}  # real, effective, saved, fs
        os.kill(tini, signal.SIGTERM)
        assert worker.proc.wait(timeout=60) == 0, worker.tail()
        log = worker.log.read_text()
        assert "stopped; outcomes:" in log, worker.tail()
        # the image's per-record path runs compiled, none of it older than its source
        assert f"{len(MODULES)} of {len(MODULES)} per-record modules compiled (mypyc)" in log
        assert "STALE" not in log
        # the state was written to the volume, as the non-root user
        done = run_in(container, "sh", "-c", f"find {STATE} -mindepth 1 ! -user {UID} | wc -l; "
                      f"find {STATE} -name CURRENT | wc -l")
        not_mine, stores = (int(n) for n in done.stdout.split())
        assert not_mine == 0 and stores >= 1, done.stdout.decode()
    finally:
        if worker is not None and worker.alive():
            worker.kill()
        delete_topics(kafka_bootstrap, prefix)


def test_entrypoint_as_pid_1_passes_sigterm_on(config, container):
    """Under a runtime the entrypoint is PID 1 of its PID namespace, where a signal without a
    handler is ignored: transcript-owner has one only once faust's worker runs, so tini must
    pass SIGTERM on even while the worker is still at its start-up checks (here: a broker
    that never answers). Run like a runtime would: its own PID namespace, chrooted into the
    image's root, as its user, with its environment only."""
    root = subprocess.run(["buildah", "mount", container], capture_output=True, text=True,
                          check=True).stdout.strip()
    env = [*config["Env"], f"KAFKA_BOOTSTRAP=127.0.0.1:{free_port()}"]  # nothing listens
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", f"--mount-proc={root}/proc",
         "chroot", f"--userspec={UID}:{UID}", root,
         "/usr/bin/env", "-i", *env, "sh", "-c", f'cd {STATE} && exec "$@"', "sh",
         *config["Entrypoint"], *config["Cmd"]],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        tini = process_named(proc.pid, "tini")
        status = Path(f"/proc/{tini}/status").read_text()
        assert re.search(r"^NSpid:\s+\d+\s+1$", status, re.M), status  # PID 1 in its namespace
        python = None
        deadline = time.monotonic() + 30
        while python is None and time.monotonic() < deadline:  # started, and in its checks
            python = next((p for p in descendants(tini) if exe_name(p).startswith("python")),
                          None)
            time.sleep(0.2)
        assert python is not None
        time.sleep(3)
        began = time.monotonic()
        os.kill(tini, signal.SIGTERM)
        code = proc.wait(timeout=20)
        out = proc.stdout.read().decode(errors="replace")
        # tini exits 128 + the signal that ended its child: transcript-owner got the SIGTERM
        assert code == 128 + signal.SIGTERM, out[-3000:]
        assert time.monotonic() - began < 10, out[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
