"""AMQP URLs and AMQP errors, for everything that speaks AMQP (the probes, the workloads, the apps).

The password never travels on the command line, where `ps` shows it: it comes from ACKSCOPE_AMQP_PASSWORD
or ACKSCOPE_AMQP_PASSWORD_FILE, or inside ACKSCOPE_AMQP_URL (the environment).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import pika
import pika.exceptions

from .config import ConfigError, read_secret
from .secret import Secret

log = logging.getLogger("ackscope")

DEFAULT_URL = "amqp://guest@localhost:5672/%2F"


@dataclass(frozen=True)
class AmqpUrl:
    url: Secret  # with the password in it
    display: str  # the same without it, for logs and messages


@dataclass(frozen=True)
class Endpoint:
    """A node to connect to: its URL (with the password), the same without it, and its TLS."""
    url: Secret
    display: str
    ssl_options: pika.SSLOptions | None = None

    @property
    def node(self) -> str:
        """host:port (no user, no vhost): the probes' `entry` label."""
        parts = urlsplit(self.display)
        return f"{parts.hostname}:{parts.port or (5671 if parts.scheme == 'amqps' else 5672)}"


def resolve(flag: str | None, environ: Mapping[str, str], table: Mapping[str, Any] = {},  # noqa: B006 - read only
            where: str = "config", default: str | None = DEFAULT_URL) -> AmqpUrl | None:
    """The AMQP URL from --amqp-url, ACKSCOPE_AMQP_URL, the TOML table's amqp_url or `default`, in that
    order, with the password from the environment or a file; None when none is set and there is no default."""
    refuse_password_on_command_line(flag)
    raw = flag or environ.get("ACKSCOPE_AMQP_URL") or table.get("amqp_url") or default
    if raw is None:
        return None
    return with_password(str(raw), read_secret("amqp_password", environ, table, where),
                         environ.get("ACKSCOPE_AMQP_USERNAME") or table.get("amqp_username"))


def refuse_password_on_command_line(flag: str | None) -> None:
    if flag and urlsplit(flag).password:
        raise ConfigError("--amqp-url must not carry a password (ps shows the command line): use "
                          "ACKSCOPE_AMQP_PASSWORD or ACKSCOPE_AMQP_PASSWORD_FILE")


def with_password(url: str, password: Secret | None, username: str | None = None) -> AmqpUrl:
    """`url` with the password set (the given one wins over one in the URL), and the user where one is given (it
    wins over the URL's: a Kubernetes Secret's username key, changed with its password); guest's default for
    guest."""
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise ConfigError(f"--amqp-url must look like amqp(s)://user@host:port/vhost, not {_display(parts)!r}")
    if username:
        host = parts.netloc.rsplit("@", 1)[-1]
        parts = parts._replace(netloc=f"{quote(username, safe='')}@{host}")
    user = unquote(parts.username or "guest")
    secret = password.reveal() if password is not None else unquote(parts.password or "")
    if not secret:
        if user != "guest":
            raise ConfigError(f"no AMQP password for user {user!r}: set ACKSCOPE_AMQP_PASSWORD or "
                              "ACKSCOPE_AMQP_PASSWORD_FILE")
        secret = "guest"  # the broker's own default account, usable from loopback only
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{quote(user, safe='')}:{quote(secret, safe='')}@{host}" + (f":{parts.port}" if parts.port else "")
    full = urlunsplit(parts._replace(netloc=netloc))
    try:
        pika.URLParameters(full)
    except ValueError as e:  # pika's own check of the query options
        raise ConfigError(f"--amqp-url {_display(parts)}: {e}") from None
    return AmqpUrl(Secret(full), _display(parts))


def _display(parts) -> str:
    host = parts.hostname or ""
    netloc = (f"{parts.username}@" if parts.username else "") + host + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def without_password(url: str) -> str:
    """`url` as it may be shown: any password taken out of it (the user's part and query options such as a TLS key's
    password), the rest as it was. For URIs the broker holds (a shovel's, a federation upstream's), which it may
    give with their password."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{host}"
    query = parts.query
    if "password" in query.lower() or "secret" in query.lower():
        query = urlencode([(k, "[redacted]" if "password" in k.lower() or "secret" in k.lower() else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="/[]")
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # as given: "amqp://" (this node) would lose its slashes in the round trip
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def ssl_options(url: str, ca_file: str | None, insecure: bool) -> pika.SSLOptions | None:
    """Verified TLS for amqps:// (against `ca_file`, or the system's CAs), unless `insecure`."""
    if not url.startswith("amqps:"):
        return None
    context = ssl.create_default_context(cafile=ca_file)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        log.warning("TLS certificate verification of the AMQP broker is off (--amqp-insecure-skip-verify)")
    return pika.SSLOptions(context, urlsplit(url).hostname)


def describe_close(reason: BaseException | None) -> str:
    """A close or connect failure in one line: '406 PRECONDITION_FAILED - inequivalent arg ...',
    'cannot connect (Connection refused)', 'login refused: ...'."""
    # pika wraps connect failures: an error holding the workflow, which holds its attempts, each its cause.
    while True:
        inner = (getattr(reason, "exceptions", None) or [getattr(reason, "exception", None)])[-1]
        if inner is None and reason is not None and reason.args and isinstance(reason.args[0], BaseException):
            inner = reason.args[0]
        if not isinstance(inner, BaseException):
            break
        reason = inner
    if isinstance(reason, OSError):
        return f"cannot connect ({reason.strerror or type(reason).__name__})"
    code = getattr(reason, "reply_code", None)
    text = getattr(reason, "reply_text", None)
    if code is not None:
        return f"{code} {text}"
    if isinstance(reason, pika.exceptions.ProbableAuthenticationError | pika.exceptions.AuthenticationError):
        return "login refused: check the AMQP user and password"
    if isinstance(reason, pika.exceptions.ProbableAccessDeniedError):
        return "access to the vhost refused: check the AMQP user's permissions"
    return str(reason) or type(reason).__name__
