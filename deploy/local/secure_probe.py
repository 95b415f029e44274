#!/usr/bin/env python3
"""Does the secured local broker answer? (kafka-up-secure.sh's readiness check; stdlib only)

    secure_probe.py ENV_FILE [--timeout S]

Reads KAFKA_BOOTSTRAP, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD and KAFKA_SSL_CAFILE from
ENV_FILE (one of the env files kafka-up-secure.sh writes), then does what a client does:
a TLS handshake verifying the broker's certificate against the CA (and its SAN against
127.0.0.1), SASL SCRAM-SHA-512 authentication (SaslHandshake v1, SaslAuthenticate v1; the
server's signature is verified too), and a Metadata v4 request that must list this broker.
Prints "node <id> at <host>:<port>, cluster <id>, authenticated as <user>".

The broker accepts connections on its client listener only once it serves requests, so a
connection made during start-up waits in the listen backlog and is answered when the broker
is ready: one attempt waits up to --timeout (10 s) for that.

Exit 0: it answered. 1: no answer (connection refused, closed, timed out). 3: the broker
refused the credentials. 4: its certificate did not verify. 2: usage or env file problem.
The password is never printed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import sys

CLIENT_ID = b"secure-probe"
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3
MECHANISM = "SCRAM-SHA-512"


class Refused(Exception):
    """The broker refused the credentials (exit 3)."""


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.i = data, 0

    def take(self, n: int) -> bytes:
        if self.i + n > len(self.data):
            raise ValueError("short response")
        out = self.data[self.i:self.i + n]
        self.i += n
        return out

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode("utf-8", "replace")

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.take(n)


def kstring(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class Connection:
    def __init__(self, host: str, port: int, cafile: str, timeout: float) -> None:
        raw = socket.create_connection((host, port), timeout=min(timeout, 3.0))
        raw.settimeout(timeout)
        context = ssl.create_default_context(cafile=cafile)
        self.sock = context.wrap_socket(raw, server_hostname=host)
        self.correlation = 0

    def request(self, api_key: int, version: int, body: bytes) -> Reader:
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation)
        header += struct.pack(">h", len(CLIENT_ID)) + CLIENT_ID
        message = header + body
        self.sock.sendall(struct.pack(">i", len(message)) + message)
        (size,) = struct.unpack(">i", self._read(4))
        if not 0 < size < 1 << 20:
            raise ValueError(f"implausible response size {size}")
        reply = Reader(self._read(size))
        if reply.i32() != self.correlation:
            raise ValueError("response for another request")
        return reply

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


def scram_sha512(conn: Connection, user: str, password: str) -> None:
    reply = conn.request(SASL_HANDSHAKE, 1, kstring(MECHANISM))
    error = reply.i16()
    if error:
        raise Refused(f"SaslHandshake error {error}: the broker does not offer {MECHANISM}")

    def authenticate(data: bytes) -> bytes:
        r = conn.request(SASL_AUTHENTICATE, 1, struct.pack(">i", len(data)) + data)
        code, message, auth = r.i16(), r.string(), r.bytes_()
        if code:
            raise Refused(f"authentication as {user!r} failed (error {code}: {message})")
        return auth or b""

    nonce = base64.b64encode(os.urandom(24)).decode()
    saslname = user.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={saslname},r={nonce}"
    server_first = authenticate(("n,," + first_bare).encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    if not fields.get("r", "").startswith(nonce):
        raise Refused("the server's SCRAM nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(fields["s"]),
                                 int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", "sha512")
    final_bare = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    signature = hmac.digest(hashlib.sha512(client_key).digest(), auth_message, "sha512")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_final = authenticate(
        f"{final_bare},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.digest(salted, b"Server Key", "sha512")
    expected = base64.b64encode(hmac.digest(server_key, auth_message, "sha512")).decode()
    if server_final != f"v={expected}":
        raise Refused("the broker's SCRAM signature does not verify")


def metadata(conn: Connection, port: int) -> str:
    # Metadata v4: no topics, allow_auto_topic_creation=false
    r = conn.request(METADATA, 4, struct.pack(">ib", 0, 0))
    r.i32()  # throttle_time_ms
    me = None
    for _ in range(r.i32()):
        node, host, bport = r.i32(), r.string(), r.i32()
        r.string()  # rack
        if bport == port and me is None:
            me = f"node {node} at {host}:{bport}"
    cluster = r.string() or "?"
    if me is None:
        raise ValueError(f"the broker does not list itself on port {port}")
    return f"{me}, cluster {cluster}"


def read_env(path: str) -> dict[str, str]:
    env = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                env[key.strip()] = value.strip()
    return env


def main(argv: list[str]) -> int:
    timeout = 10.0
    args = list(argv)
    if "--timeout" in args:
        i = args.index("--timeout")
        timeout = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        env = read_env(args[0])
        host, _, port_s = env["KAFKA_BOOTSTRAP"].split(",")[0].rpartition(":")
        user, password, cafile = (env["KAFKA_SASL_USERNAME"], env["KAFKA_SASL_PASSWORD"],
                                  env["KAFKA_SSL_CAFILE"])
        port = int(port_s)
    except (OSError, KeyError, ValueError) as exc:
        print(f"secure_probe: {args[0]}: unusable ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    try:
        conn = Connection(host, port, cafile, timeout)
    except ssl.SSLCertVerificationError as exc:
        print(f"secure_probe: {host}:{port}: certificate not trusted: {exc.verify_message}",
              file=sys.stderr)
        return 4
    except (OSError, ValueError) as exc:
        print(f"secure_probe: {host}:{port}: no answer ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 1
    try:
        scram_sha512(conn, user, password)
        info = metadata(conn, port)
    except Refused as exc:
        print(f"secure_probe: {host}:{port}: {exc}", file=sys.stderr)
        return 3
    except (OSError, ValueError, KeyError) as exc:
        print(f"secure_probe: {host}:{port}: no answer ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 1
    finally:
        conn.close()
    print(f"{info}, authenticated as {user}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
