"""Options from the command line, the environment and a TOML file, in that order of precedence.

An option `foo_bar` is `--foo-bar` on the command line, `ACKSCOPE_FOO_BAR` in the environment and
`foo_bar` in the command's table of the TOML file (`[exporter]`). Passwords are the exception: they come
only from `ACKSCOPE_<NAME>` or a file (`ACKSCOPE_<NAME>_FILE`, or `<name>_file` in TOML), never from the
command line, where `ps` would show them.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .secret import Secret


class ConfigError(ValueError):
    """A setting is missing or wrong; the message names it and says what is expected."""


@dataclass(frozen=True)
class Option:
    key: str
    default: Any
    parse: Callable[[Any], Any]
    help: str
    switch: bool = False  # a flag without a value on the command line

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def env(self) -> str:
        return "ACKSCOPE_" + self.key.upper()


def add_arguments(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    for o in options:
        help_text = f"{o.help} [env {o.env}; default {o.default!r}]"
        if o.switch:
            parser.add_argument(o.flag, dest=o.key, action="store_true", default=None, help=help_text)
        else:
            parser.add_argument(o.flag, dest=o.key, default=None, metavar=o.key.split("_")[-1].upper(),
                                help=help_text)


def resolve(options: Sequence[Option], args: argparse.Namespace, environ: Mapping[str, str],
            table: Mapping[str, Any], secrets: Sequence[str] = (), where: str = "config") -> dict[str, Any]:
    """Each option's value from the first source that sets it, parsed; unknown TOML keys are errors."""
    known = {o.key for o in options} | set(secrets) | {f"{s}_file" for s in secrets}
    for key in table:
        if key in secrets:
            raise ConfigError(f"{where}: '{key}' may not be written in the config file: use '{key}_file' "
                              f"or ACKSCOPE_{key.upper()}")
        if key not in known:
            raise ConfigError(f"{where}: unknown setting '{key}'")
    values: dict[str, Any] = {}
    for o in options:
        for source, raw in ((o.flag, getattr(args, o.key, None)), (o.env, environ.get(o.env)),
                            (f"{where}: {o.key}", table.get(o.key))):
            if raw is not None and raw != "":
                try:
                    values[o.key] = o.parse(raw)
                except (ValueError, TypeError, re.error) as e:
                    raise ConfigError(f"{source}: {e}") from None
                break
        else:
            values[o.key] = None if o.default is None else o.parse(o.default)
    for name in secrets:
        values[name] = read_secret(name, environ, table, where)
    return values


def read_secret(name: str, environ: Mapping[str, str], table: Mapping[str, Any], where: str) -> Secret | None:
    env = f"ACKSCOPE_{name.upper()}"
    if environ.get(env):
        return Secret(environ[env])
    for source, path in ((f"{env}_FILE", environ.get(f"{env}_FILE")), (f"{where}: {name}_file",
                                                                          table.get(f"{name}_file"))):
        if path:
            try:
                return Secret(Path(path).read_text().rstrip("\r\n"))
            except OSError as e:
                raise ConfigError(f"{source}: cannot read {path}: {e.strerror}") from None
    return None


def load_toml(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"--config: cannot read {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--config: {path} is not valid TOML: {e}") from None


def table(document: Mapping[str, Any], name: str, path: str | None) -> Mapping[str, Any]:
    section = document.get(name, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [{name}] must be a table")
    return section


# -- parsers -------------------------------------------------------------------------------------------
def http_url(credentials_from: str) -> Callable[[Any], str]:
    """A parser of an http(s) URL that carries no credentials: in a URL they would show in `ps`, in logs and on
    the dashboard's pages. `credentials_from` says where they go instead."""
    def parse(v: Any) -> str:
        url = str(v)
        parts = urlsplit(url)
        if parts.username or parts.password:  # checked first: the message must not echo them
            raise ValueError(f"must not carry credentials: use {credentials_from}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must look like http(s)://host:port, not {url!r}")
        return url.rstrip("/")
    return parse


def http_urls(credentials_from: str) -> Callable[[Any], tuple[str, ...]]:
    """A parser of one or more http(s) URLs, comma-separated (or a TOML list), each as `http_url` takes it."""
    one = http_url(credentials_from)

    def parse(v: Any) -> tuple[str, ...]:
        items = v if isinstance(v, list) else str(v).split(",")
        urls = tuple(one(item.strip()) for item in map(str, items) if item.strip())
        if not urls:
            raise ValueError("must name at least one http(s)://host:port")
        return urls
    return parse


def positive_float(v: Any) -> float:
    f = float(v)
    if not f > 0:
        raise ValueError(f"must be a positive number of seconds, not {v!r}")
    return f


def positive_int(v: Any) -> int:
    text = str(v).strip()
    if isinstance(v, bool) or not text.isdigit() or int(text) <= 0:
        raise ValueError(f"must be a positive whole number, not {v!r}")
    return int(text)


def non_negative_int(v: Any) -> int:
    text = str(v).strip()
    if isinstance(v, bool) or not text.isdigit():
        raise ValueError(f"must be a whole number, 0 or more, not {v!r}")
    return int(text)


def boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, not {v!r}")


def regex(v: Any) -> re.Pattern:
    return re.compile(str(v))


def host_port(v: Any) -> tuple[str, int]:
    host, sep, port = str(v).rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be HOST:PORT, not {v!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def choice(name: str, allowed: Sequence[str]) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        if str(v) not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {v!r}")
        return str(v)
    parse.__name__ = name
    return parse


def writable_dir(v: Any) -> str:
    """A directory this process can write files in, made when missing. Checked at the start, because the
    writes come later, from threads that keep what they cannot write in memory: a read-only volume or a
    directory of another owner is then one line and a non-zero exit, not an exporter that runs without its
    history."""
    path = Path(str(v))
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise ValueError(f"cannot write in {path}: {e.strerror}") from None
    return str(path)


def existing_file(v: Any) -> str:
    if not Path(str(v)).is_file():
        raise ValueError(f"no such file: {v}")
    return str(v)
