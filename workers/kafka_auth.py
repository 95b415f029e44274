"""Refuse to start, and say why, when a cluster rejects this client's credentials or TLS setup.

kafka-python (3.0) retries a bootstrap that fails SASL authentication or TLS verification until
its timeout (30 s) and then says only `Unable to bootstrap from [...]`; worse, when the broker's
error response and its closing of the connection arrive together, it drops the response and
sees only `socket disconnected`. So a wrong password looked like an unreachable broker.

`check_access(settings)` makes one connection the way the clients will (aiokafka's
`create_conn`: the same TLS context, SASL mechanism and credentials) to the first bootstrap
server that accepts one, and raises `ConnectionRefused` when the broker answers that it will
not have this client: SASL authentication failed or the mechanism is not enabled, the broker's
certificate does not verify, or it does not speak TLS on that port. Anything else (nothing
listening, a time-out) passes: the clients retry and report that themselves. Once per process
for the same settings; PLAINTEXT has nothing to refuse and costs nothing.

`ConnectionRefused` is a SettingsError: the command line prints `error: <message>` and exits 2.
The message names the user, the mechanism and the bootstrap, and gives the broker's reason;
never the password (the broker's message does not carry it either).
"""

from __future__ import annotations

import asyncio
import ssl

from workers.settings import KafkaSettings, SettingsError

_checked: set[tuple] = set()


class ConnectionRefused(SettingsError):
    """The cluster refused this client: authentication failed, or TLS did not work out."""


def check_access(ks: KafkaSettings, timeout_s: float = 15.0) -> None:
    """Raise ConnectionRefused if the cluster rejects these settings (see the module doc)."""
    if ks.security_protocol == "PLAINTEXT":
        return
    key = _key(ks)
    if key in _checked:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return  # never block a running event loop: the worker checks before its loop starts
    loop = asyncio.new_event_loop()  # its own, leaving the thread's current loop (faust's) be
    try:
        loop.run_until_complete(_check(ks, timeout_s))
    finally:
        loop.close()
    _checked.add(key)


def _key(ks: KafkaSettings) -> tuple:
    secret = ks.sasl_password.get_secret_value() if ks.sasl_password else None
    return (ks.bootstrap, ks.security_protocol, ks.sasl_mechanism, ks.sasl_username, secret,
            ks.ssl_cafile, ks.ssl_certfile, ks.ssl_keyfile)


async def _check(ks: KafkaSettings, timeout_s: float) -> None:
    from aiokafka import errors
    from aiokafka.conn import create_conn

    kwargs = ks.kafka_python_kwargs()
    del kwargs["bootstrap_servers"]
    for server in ks.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        host = host.strip("[]")
        try:
            conn = await asyncio.wait_for(
                create_conn(host, int(port), client_id="transcript-owner-access-check",
                            request_timeout_ms=int(timeout_s * 1000), **kwargs),
                timeout_s)
        except ssl.SSLCertVerificationError as exc:
            trust = (f"KAFKA_SSL_CAFILE={ks.ssl_cafile}" if ks.ssl_cafile
                     else "the system's trust store (KAFKA_SSL_CAFILE is unset)")
            raise ConnectionRefused(
                f"TLS: the certificate of Kafka at {server} did not verify against {trust}: "
                f"{exc.verify_message or exc.reason}") from None
        except ssl.SSLError as exc:
            if exc.reason != "WRONG_VERSION_NUMBER":
                continue
            raise ConnectionRefused(
                f"TLS: Kafka at {server} does not speak TLS on that port "
                f"(KAFKA_SECURITY_PROTOCOL={ks.security_protocol})") from None
        except errors.UnsupportedSaslMechanismError:
            raise ConnectionRefused(
                f"SASL: Kafka at {server} does not enable KAFKA_SASL_MECHANISM="
                f"{ks.sasl_mechanism or 'PLAIN'}") from None
        except (errors.SaslAuthenticationFailed, errors.IllegalSaslStateError,
                errors.AuthenticationFailedError) as exc:
            raise ConnectionRefused(
                f"authentication failed: Kafka at {server} refused KAFKA_SASL_USERNAME="
                f"{ks.sasl_username!r} (SASL {ks.sasl_mechanism or 'PLAIN'} over "
                f"{ks.security_protocol}; check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD): "
                f"{_reason(exc)}") from None
        except (TimeoutError, OSError, errors.KafkaError):
            continue  # not reachable, or not answering: the clients retry and say so
        else:
            try:  # close() hands back a future that is done once the socket is closed
                await asyncio.wait_for(asyncio.shield(conn.close()), 5)
            except (TimeoutError, OSError):
                pass
            return


def _reason(exc: BaseException) -> str:
    """The broker's message, without aiokafka's '[Error 58] SaslAuthenticationFailed: '."""
    text = " ".join(str(exc).split())
    head, sep, rest = text.partition(": ")
    if sep and head.startswith("[Error ") and head.endswith(type(exc).__name__):
        text = rest
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
