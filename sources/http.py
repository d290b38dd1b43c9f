"""Reading a broker's HTTP endpoints within a poll's deadline: the one place both sources (the management
API and the Prometheus plugin) turn requests' failures into FetchErrors, each with a one-word reason (a
label value) and a sentence a human understands; the password never appears in either."""

from __future__ import annotations

import http.client
import json
import logging
import re
import ssl
import threading
import time

import requests
import urllib3

from ackscope.core.config import http_url
from ackscope.core.secret import Secret
from ackscope.model.source import FetchError

log = logging.getLogger("ackscope.sources")

_CHUNK = 64 * 1024


class HttpReader:
    """GETs under `base_url` with basic auth, a timeout per request and a deadline no answer outlives.
    `what` names the endpoint's owner in messages ("management plugin", "Prometheus plugin")."""

    def __init__(self, base_url: str, username: str, password: Secret, *, timeout: float, verify: bool | str,
                 what: str):
        self.base_url = http_url("ACKSCOPE_USERNAME and ACKSCOPE_PASSWORD or ACKSCOPE_PASSWORD_FILE")(base_url)
        self.username = username
        self._password = password
        self.timeout = timeout
        self.verify = verify
        self.what = what
        if verify is False:
            # Said once here, instead of urllib3 warning on every request of every poll.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            log.warning("TLS certificate verification of %s is off", self.base_url)
        self._local = threading.local()  # one Session per worker thread: Sessions are not thread-safe

    def json(self, endpoint: str, path: str, params: dict, deadline: float, patient: bool = False):
        body = self.get(endpoint, path, params, deadline, "json", patient)
        try:
            return json.loads(body) if len(body) < _LARGE else _loads_by_item(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise FetchError(endpoint, "malformed", f"answer is not valid JSON ({len(body)} bytes, "
                             f"starts {body[:40]!r})") from None

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.auth = (self.username, self._password.reveal())
            self._local.session = session
        return session

    def get(self, endpoint: str, path: str, params: dict, deadline: float, content: str,
            patient: bool = False) -> bytes:
        """The body of GET `path`, whose Content-Type must contain `content` (json, text/plain). `patient`:
        the answer is a whole list the broker builds before it sends a byte (every queue of a large broker:
        3 s at 50,000 without statistics, 21 s with), so its first byte may take until the deadline, not only
        the per-request timeout."""
        try:
            return self._get(endpoint, path, params, deadline, content, patient)
        except _StaleConnection:
            # The server closed a kept-alive connection as the request went out on it (the plugin's web server
            # closes idle ones): nothing was read, so the request is sent once more, on a new connection.
            return self._get(endpoint, path, params, deadline, content, patient, retried=True)

    def _get(self, endpoint: str, path: str, params: dict, deadline: float, content: str, patient: bool,
             retried: bool = False) -> bytes:
        url = f"{self.base_url}{path}"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(endpoint, "deadline", "poll deadline passed before the request was sent")
        wait = min(self.timeout, remaining)
        try:
            # verify is passed per request: a Session's own verify loses to REQUESTS_CA_BUNDLE in the environment.
            with self._session().get(url, params=params, timeout=(wait, remaining if patient else wait),
                                     stream=True, verify=self.verify) as response:
                self._check_status(endpoint, path, response, content)
                return self._read_body(endpoint, response, deadline)
        except FetchError:
            raise
        # Each cause becomes a FetchError whose sentence is the whole story: no chained traceback.
        except requests.exceptions.SSLError as e:
            raise FetchError(endpoint, "tls", f"TLS handshake with {self.base_url} failed: {_tls_advice(e)}") from None
        except requests.exceptions.Timeout:
            raise FetchError(endpoint, "timeout", f"no answer from {self.base_url} within {wait:.1f}s") from None
        except requests.exceptions.ConnectionError as e:
            if not retried and isinstance(_innermost(e), http.client.RemoteDisconnected):
                raise _StaleConnection() from None
            if "timed out" in str(e).lower():
                raise FetchError(endpoint, "timeout", f"no answer from {self.base_url} within {wait:.1f}s") from None
            raise FetchError(endpoint, "connection", f"cannot connect to {self.base_url} ({_root_cause(e)})") from None
        except requests.RequestException as e:
            raise FetchError(endpoint, "connection", f"request to {self.base_url} failed ({_root_cause(e)})") from None

    def _check_status(self, endpoint: str, path: str, response: requests.Response, content: str) -> None:
        status = response.status_code
        if status == 200:
            ctype = response.headers.get("Content-Type", "")
            if content not in ctype:
                raise FetchError(endpoint, "malformed", f"answer is {ctype or 'untyped'}, not {content} "
                                 "(a proxy's error page?)")
            return
        if status == 401:
            # The management API answers 401 to a refused login and to a login it accepts for a user that may not
            # read this path; only the broker's reason tells them apart.
            said = _broker_reason(response)
            lowered = said.lower()
            if "not management user" in lowered:  # the password was right
                raise FetchError(endpoint, "unauthorized", f"user {self.username!r} has no management tag, so the "
                                 "management API refuses it: give it the 'monitoring' tag")
            if "not authorised to access" in lowered:  # the password was right, the object is out of reach
                raise FetchError(endpoint, "forbidden", f"user {self.username!r} may not read {path} "
                                 f"(the broker: {said})")
            raise FetchError(endpoint, "unauthorized", f"login failed for user {self.username!r}: check "
                             "ACKSCOPE_USERNAME and ACKSCOPE_PASSWORD / ACKSCOPE_PASSWORD_FILE"
                             + (f" (the broker: {said})" if said else ""))
        if status == 403:
            raise FetchError(endpoint, "forbidden", f"user {self.username!r} may not read {path}: "
                             "give it the 'monitoring' tag")
        if status == 404:
            raise FetchError(endpoint, "not_found", f"{path} not found: is this the {self.what}'s URL?", status)
        reason = "server_error" if status >= 500 else "http_error"
        said = _broker_reason(response)
        raise FetchError(endpoint, reason, f"HTTP {status} from {path}" + (f": {said}" if said else ""), status)

    @staticmethod
    def _read_body(endpoint: str, response: requests.Response, deadline: float) -> bytes:
        chunks = []
        for chunk in response.iter_content(_CHUNK):
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise FetchError(endpoint, "deadline", "poll deadline passed while the answer was arriving")
        return b"".join(chunks)


class Readers:
    """One HttpReader per base URL, all with one login and one owner (`what`), each kept for the life of its
    source so its connections are kept alive across polls: the Prometheus plugins of a cluster's nodes."""

    def __init__(self, username: str, password: Secret, *, timeout: float, verify: bool | str, what: str):
        self._made = lambda url: HttpReader(url, username, password, timeout=timeout, verify=verify, what=what)
        self._by_url: dict[str, HttpReader] = {}
        self._lock = threading.Lock()  # fetch threads ask at once

    def at(self, url: str) -> HttpReader:
        """The reader of `url`; ValueError when it is not an http(s) URL without credentials."""
        with self._lock:
            reader = self._by_url.get(url)
            if reader is None:
                reader = self._by_url[url] = self._made(url)
            return reader


# From this size an answer is decoded item by item: one json.loads of a large broker's list (9 MB at 50,000
# queues) holds the GIL for 0.3 s, and a scrape served meanwhile would wait that long; between items, the
# serving threads get their turn.
_LARGE = 1 << 20
_DECODER = json.JSONDecoder()
_BLANK = re.compile(r"[ \t\n\r]*")


def _loads_by_item(text: str):
    """json.loads(text), decoding a top-level array one item at a time; ValueError as json.loads raises it."""
    at = _BLANK.match(text).end()
    if not text.startswith("[", at):
        return json.loads(text)
    items, end = [], len(text)
    at = _BLANK.match(text, at + 1).end()
    if text.startswith("]", at):
        at += 1
    else:
        while True:
            item, at = _DECODER.raw_decode(text, at)
            items.append(item)
            at = _BLANK.match(text, at).end()
            if text.startswith(",", at):
                at = _BLANK.match(text, at + 1).end()
            elif text.startswith("]", at):
                at += 1
                break
            else:
                raise ValueError(f"expected ',' or ']' at character {at}")
    if _BLANK.match(text, at).end() != end:
        raise ValueError(f"extra data at character {at}")
    return items


class _StaleConnection(Exception):
    """A kept-alive connection the server had closed: the request never reached it."""


def _innermost(error: BaseException) -> BaseException:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    return error


def _root_cause(error: BaseException) -> str:
    """The innermost cause, briefly: 'Connection refused', not three nested reprs."""
    text = str(_innermost(error))
    for marker in ("Connection refused", "Name or service not known", "certificate verify failed",
                   "No route to host", "Connection reset"):
        if marker in text:
            return marker
    return text.split(": ")[-1][:120] or type(error).__name__


# OpenSSL's verify codes for what a trusted CA does not fix (X509_V_ERR_CERT_HAS_EXPIRED, _CERT_NOT_YET_VALID,
# _HOSTNAME_MISMATCH, _IP_ADDRESS_MISMATCH): naming them spares the operator a --ca-file that would change nothing.
_WRONG_HOST = "the server's certificate is not for this host name or address: use one it was issued for in the URL"
_CERT_ADVICE = {10: "the server's certificate has expired: renew it",
                9: "the server's certificate is not valid yet: check the clocks, or the certificate's dates",
                62: _WRONG_HOST, 64: _WRONG_HOST}


def _tls_advice(error: BaseException) -> str:
    """Why verification failed, and what to do, in one line."""
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            if e.verify_code in _CERT_ADVICE:
                return _CERT_ADVICE[e.verify_code]
            return f"{e.verify_message}; set --ca-file to the CA that issued it, or --insecure-skip-verify for tests"
        todo.extend(x for x in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args)
                    if isinstance(x, BaseException))
    return f"{_root_cause(error)}; set --ca-file, or --insecure-skip-verify for tests"


def _broker_reason(response: requests.Response) -> str:
    """The broker's own words for a refusal ({"reason": "Stats in management UI are disabled on this node"}),
    briefly; "" when it gave none."""
    try:
        reason = response.json().get("reason")
    except (ValueError, AttributeError):
        return ""
    return reason[:200] if isinstance(reason, str) else ""
