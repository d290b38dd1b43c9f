"""What the node's log says about deliveries breaking, as ackscope.model.events' records.

RabbitMQ 3.10 to 4.3 write each log event in one of two formats:
- plain: `2026-11-26 08:23:17.932709+00:00 [error] <0.831.0> message`; a message of several lines repeats that
  header on each of them;
- JSON (`log.file.formatter = json`): one object a line, the message in "msg" with its newlines.
The messages read here, as recorded from each release in tests/data/broker-log-*/:
- `Channel error on connection <pid> (peer -> local, vhost: 'v', user: 'u'), channel N:` then
  `operation basic.ack caused a channel exception precondition_failed: unknown delivery tag 1`;
- before a consumer timeout's channel error, a warning from the same channel process naming the consumer
  (4.0: `Consumer 'tag' on channel 2 and queue 'q' in vhost '/' has timed out ... delivery tag = 1. Timeout
  used: 15000 ms`; 3.10 names neither the queue nor, though it prints a number there, the consumer's tag). 4.3
  logs nothing when it cancels a quorum queue's AMQP 0-9-1 consumer;
- an AMQP 1.0 receiver's deliveries released at a quorum queue's consumer timeout (4.3: `released unsettled
  messages due to consumer timeout on connection 'peer -> local' for link 'name' with handle 0 to AMQP container
  'id' consuming from queue 'q' in vhost 'v'`, a warning the first time for each link);
- connections granted their vhost (with the client's name), closed by the client, lost (`client unexpectedly
  closed TCP connection`, missed heartbeats) or closed by the broker on an error (`{amqp_error,frame_error,...}`,
  `{handshake_timeout,handshake}`);
- `Error on AMQP connection <pid> (peer -> local[ - name][, vhost: 'v'][, user: 'u'], state: s)[, channel N]:` then
  the connection exception (`operation channel.open caused a connection exception channel_error: "..."`), a login
  refused (`PLAIN login refused: user 'u' - invalid credentials`) or a vhost that does not exist;
- a message dropped in a dead-letter cycle: 3.10 `Message dropped. Dead-letter queues cycle detected: [<<"q">>,...]`,
  4.x `Message dropped because the following list of queues (ordered by death recency) contains a dead letter cycle
  without reason 'rejected'. This list will not be logged again: [...]`: each cycle once per queue process;
- a quorum queue dead-lettering at-least-once that cannot forward (`Cannot forward any dead-letter messages from
  source [quorum ]queue 'q' in vhost 'v' because its configured dead-letter-exchange exchange 'x' in vhost 'v'
  does not exist. ...`), said once;
- the use of a deprecated feature (4.x: `Deprecated features: `name`: ...`).
Info-level messages not read here are passed over. A warning or an error that makes no event is counted as not
understood, its first line kept for a human (never passed over in silence), unless it is known to be about the node
alone (its start) or said again by the record after it. A line in neither format is counted as unknown.
"""

from __future__ import annotations

import functools
import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

from ackscope.model.events import (
    BROKER_LOG,
    CHANNEL_ERROR,
    CONNECTION_CLOSED,
    CONNECTION_ERROR,
    CONNECTION_OPENED,
    CONSUMER_TIMEOUT,
    DEAD_LETTER_CYCLE,
    DEAD_LETTER_EXCHANGE_MISSING,
    DEAD_LETTERING_STUCK,
    DEPRECATED_FEATURE,
    MESSAGE_DROPPED,
    BrokerEvent,
)

_PLAIN = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?) \[(\w+)\] (<[\d.]+>) ?(.*)")
_CHANNEL_ERROR = re.compile(
    r"Channel error on connection (<[\d.]+>) \((\S+ -> \S+), vhost: '(.*?)', user: '(.*?)'\), channel (\d+):\n"
    r"operation (\S+) caused a channel exception (\w+): (.*)", re.S)
_TIMED_OUT = re.compile(r"delivery acknowledgement on channel \d+ timed out\. Timeout value used: (\d+) ms")
_CONSUMER_TIMEOUT = re.compile(  # 4.x names the queue and the delivery; 3.10 only the consumer and channel
    r"Consumer (?:'(?P<tag>.*)'|\S+) on channel (?P<channel>\d+)"
    r"(?: and queue '(?P<queue>.*)' in vhost '(?P<vhost>.*)')? has timed out waiting for (?:a consumer|delivery) "
    r"acknowledgement(?: of a delivery with delivery tag = (?P<delivery_tag>\d+))?\. Timeout used: (?P<ms>\d+) ms")
# 3.10: `connection <0.820.0> (peer -> local - name): user ...`; 4.x: `connection peer -> local - name: user ...`
_GRANTED = re.compile(r"connection (?:<[\d.]+> \((?P<a>\S+ -> \S+?)(?: - (?P<an>.*))?\)|(?P<b>\S+ -> \S+?)"
                      r"(?: - (?P<bn>.*))?): user '(?P<user>.*)' authenticated and granted access to vhost "
                      r"'(?P<vhost>.*)'$")
# `closing AMQP connection [<pid>] (peer -> local[ - name][, vhost: 'v', user: 'u'][, duration: 'd'])[:\nreason]`
_CLOSING = re.compile(r"closing AMQP connection (?:<[\d.]+> )?\((?P<conn>\S+ -> \S+?)(?: - (?P<name>.*?))?"
                      r"(?:, vhost: '(?P<vhost>.*?)', user: '(?P<user>.*?)')?(?:, duration: '(?P<duration>.*?)')?\)"
                      r"(?::\n(?P<why>.*))?$", re.S)
_AMQP_ERROR = re.compile(r"\{amqp_error,(\w+),\s*\"((?:[^\"\\]|\\.)*)\"")
_RELEASED = re.compile(r"released unsettled messages due to consumer timeout on connection '(?P<conn>.*?)' for link "
                       r"'(?P<link>.*)' with handle \d+ to AMQP container '.*' consuming from queue '(?P<queue>.*)' "
                       r"in vhost '(?P<vhost>.*)'$", re.S)
_HEARTBEATS = re.compile(r"missed heartbeats from client, timeout: (\d+)s")
_ERLANG_TERM = re.compile(r"\{(\w+),")  # a close's reason as an Erlang term: {handshake_timeout,handshake}
# `Error on AMQP connection <pid> (peer -> local[ - name][, vhost: 'v'][, user: 'u'], state: s)[, channel N]:\ntext`
_CONNECTION_EXCEPTION = re.compile(
    r"Error on AMQP connection (?:<[\d.]+> )?\((?P<conn>\S+ -> \S+?)(?: - (?P<name>.*?))?"
    r"(?:, vhost: '(?P<vhost>.*?)')?(?:, user: '(?P<user>.*?)')?, state: \w+\)(?:, channel (?P<channel>\d+))?:\n"
    r"\s*(?P<why>.*)$", re.S)
_OPERATION = re.compile(r"operation (\S+) caused a connection exception (\w+): \"?(.*?)\"?$", re.S)
# What the broker answers a refused login or vhost, which the log's words alone say: ACCESS_REFUSED, NOT_ALLOWED
_REFUSALS = (("login refused", "access_refused"), ("not found", "not_allowed"))
_QUEUE_NAMED = re.compile(r"queue '(.*?)' in vhost '")
_DEAD_LETTER_CYCLE = ("Message dropped. Dead-letter queues cycle detected",  # 3.10
                      "Message dropped because the following list of queues")  # 4.x
# A queue name in an Erlang list: <<"q">>, <<"q"/utf8>> or, for bytes ~p cannot print, <<99,97,102,195,169>>
_BINARY = re.compile(r'<<"((?:[^"\\]|\\.)*)"(?:/utf8)?>>|<<([\d,\s]+)>>')
_DEPRECATED = re.compile(r"Deprecated features: `(\w+)`")
# 3.10 names a "source quorum queue", 4.x a "source queue"
_CANNOT_FORWARD = re.compile(r"Cannot forward any dead-letter messages from source (?:quorum )?queue '(.*?)' in vhost "
                             r"'(.*?)' because (.*?)\. ", re.S)

# How each message read here starts: any other record's lines are passed over, not kept (most of a log).
_READ = ("Channel error on connection", "Consumer ", "connection ", "closing AMQP connection", "released unsettled",
         "Error on AMQP connection", "Message dropped", "Deprecated features: ", "Cannot forward any dead-letter")
# Levels at which a record no parser turns into an event is counted as not understood: never passed over silently.
_SAID = frozenset(("warning", "error", "critical", "alert", "emergency"))
# Warnings known to be about the node alone: written as it starts, or its alarms (which polls read: memory-alarm,
# disk-alarm), read and about no client; or the node's own AMQP client (its management API's publish and get, a
# shovel's or federation link's connection) raising its call timeout as it connects (3.10.8, 4.x: "AMQP 0-9-1 client
# call timeout was 70000 ms, is updated to a safe effective value of 130000 ms").
_NODE_ALONE = ('Message store "', "Classic peer discovery backend: ", "memory resource limit alarm ",
               "disk resource limit alarm ", "AMQP 0-9-1 client call timeout was ")
# Warnings the record after them says again, with the connection: 4.3's failed login before its connection error.
_SAID_AGAIN = re.compile(r"User '.*' failed to authenticate: ")
# What _event returns for a record it read whole and holds for the next (a consumer's timeout, before its close).
_HELD = object()
# A URI's user and password (a shovel's or federation upstream's, in its warnings), left out of a line shown.
_CREDENTIALS = re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^\s/@]*@", re.I)


def shown(line: str) -> str:
    """A log line as ackscope shows it (its /api/breaks, its own log): any URI's credentials left out."""
    return _CREDENTIALS.sub(r"\1…@", line)


# A record of more lines is cut (a crash report); the lines past it are not what these messages need.
MAX_RECORD_LINES = 200
# Consumer timeout warnings waiting for their channel error (the next line of the same process).
MAX_WAITING = 1000


@dataclass
class LogCounts:
    """What the reader has seen since it started: lines, lines in neither format, events made of them, and
    warnings and errors it made no event of (not understood)."""

    lines: int = 0
    unknown: int = 0
    events: int = 0
    first_unknown: str | None = field(default=None, repr=False)  # the first, for a human to see what it was
    not_understood: int = 0
    first_not_understood: str | None = field(default=None, repr=False)  # its first line, credentials left out


@dataclass(slots=True)
class _Record:
    stamp: str  # its timestamp as written: parsed only for a record that makes an event
    level: str
    pid: str
    lines: list[str] | None  # None for a message not read here (see _READ): its lines are not kept
    key: str  # the plain header shared by its lines; "" for JSON (a whole record a line)
    first: str  # its first line as written: the example of a record not understood

    @property
    def at(self) -> float | None:
        return _timestamp(self.stamp)


@functools.lru_cache(maxsize=64)
def _second(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace(" ", "T", 1)).timestamp()
    except ValueError:
        return None


def _timestamp(text: str) -> float | None:
    """Seconds since the epoch of a log line's timestamp. Its whole second is parsed once (cached): a busy log
    writes thousands of lines a second, each in the same second as the last."""
    if len(text) == 32 and text[19] == "." and text[26] in "+-":  # what RabbitMQ writes: microseconds and a zone
        second = _second(text[:19] + text[26:])
        return None if second is None or not text[20:26].isdigit() else second + float(text[19:26])
    rest = text[19:]  # what follows "YYYY-MM-DD HH:MM:SS": a fraction, a zone, both or neither
    zone = rest.lstrip(".0123456789")
    fraction = rest[:len(rest) - len(zone)]
    second = _second(text[:19] + zone)
    if second is None or fraction.count(".") > 1 or fraction and fraction[0] != ".":
        return None
    return second + float(fraction) if len(fraction) > 1 else second


class LogReader:
    """Lines of the node's log in, events out. A record (a message of several lines) is complete when the next
    one starts, or at `flush()` (the log has nothing more for now)."""

    def __init__(self) -> None:
        self.counts = LogCounts()
        self._pending: _Record | None = None
        self._timeouts: OrderedDict[str, re.Match] = OrderedDict()  # channel process -> its timeout warning

    def feed(self, lines: list[str] | tuple[str, ...]) -> list[BrokerEvent]:
        events: list[BrokerEvent] = []
        self.counts.lines += len(lines)
        for line in lines:
            pending = self._pending
            # A record's next line repeats its header: told by its start alone, without parsing it again.
            if pending is not None and pending.key and line.startswith(pending.key):
                if pending.lines is not None and len(pending.lines) < MAX_RECORD_LINES:
                    pending.lines.append(line[len(pending.key):])
                continue
            record = self._parse(line)
            if record is None:
                continue
            if pending is not None and (event := self._complete(pending)) is not None:
                events.append(event)
            self._pending = record
        return events

    def flush(self) -> list[BrokerEvent]:
        """The record in hand is complete: the log has nothing more for now."""
        record, self._pending = self._pending, None
        event = self._complete(record) if record is not None else None
        return [] if event is None else [event]

    def _complete(self, record: _Record) -> BrokerEvent | None:
        event = self._event(record) if record.lines is not None else None
        if event is None:
            if record.level in _SAID and not self._known(record):
                self.counts.not_understood += 1
                self.counts.first_not_understood = self.counts.first_not_understood or shown(record.first[:300])
            return None
        if event is _HELD or event.at is None:  # a date the header's pattern let through but no calendar has
            return None
        self.counts.events += 1
        return event

    @staticmethod
    def _known(record: _Record) -> bool:
        """A warning read and known to make no event: about the node alone, or said again by the next record."""
        if record.lines:
            message = record.lines[0]
        elif record.key:
            message = record.first[len(record.key):]
        else:  # JSON, its message not kept: read again (a warning not read here is rare)
            message = str(json.loads(record.first).get("msg", ""))
        return message.startswith(_NODE_ALONE) or _SAID_AGAIN.match(message) is not None

    def _parse(self, line: str) -> _Record | None:
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                stamp = str(obj["time"])
                if _timestamp(stamp) is not None:
                    message = str(obj.get("msg", ""))
                    return _Record(stamp, str(obj.get("level", "")), str(obj.get("pid", "")),
                                   message.split("\n") if message.startswith(_READ) else None, "", line)
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
        elif found := _PLAIN.fullmatch(line):
            message = found[4]
            return _Record(found[1], found[2], found[3], [message] if message.startswith(_READ) else None,
                           line[:found.start(4)], line)
        if line.strip():
            self.counts.unknown += 1
            self.counts.first_unknown = self.counts.first_unknown or shown(line[:200])
        return None

    def _event(self, r: _Record):
        """The record's event, _HELD (read, and kept for the record after it), or None (not understood)."""
        message = "\n".join(r.lines)
        if message.startswith("Channel error on connection"):
            return self._channel_error(r, message)
        if message.startswith("Consumer ") and (found := _CONSUMER_TIMEOUT.match(message)):
            self._timeouts[r.pid] = found
            while len(self._timeouts) > MAX_WAITING:
                self._timeouts.popitem(last=False)
            return _HELD
        if message.startswith("released unsettled") and (found := _RELEASED.match(message)):
            return BrokerEvent(r.at, CONSUMER_TIMEOUT, BROKER_LOG, connection=found["conn"], pid=r.pid,
                               vhost=found["vhost"], queue=found["queue"], link=found["link"], reason="released",
                               text=message.split(" on connection ", 1)[0])
        if message.startswith("Error on AMQP connection") and (found := _CONNECTION_EXCEPTION.match(message)):
            return self._connection_exception(r, found)
        if message.startswith(_DEAD_LETTER_CYCLE):
            return self._dead_letter_cycle(r, message)
        if message.startswith("Cannot forward any dead-letter") and (found := _CANNOT_FORWARD.match(message)):
            queue, vhost, why = found.groups()
            return BrokerEvent(r.at, DEAD_LETTERING_STUCK, BROKER_LOG, pid=r.pid, vhost=vhost, queue=queue,
                               reason=DEAD_LETTER_EXCHANGE_MISSING if why.endswith("does not exist") else "stuck",
                               text=" ".join(why.split()))
        if message.startswith("Deprecated features: ") and (found := _DEPRECATED.match(message)):
            return BrokerEvent(r.at, DEPRECATED_FEATURE, BROKER_LOG, pid=r.pid, reason=found[1],
                               text=message.split("\n", 1)[0].split(": ", 2)[-1])
        if message.startswith("connection ") and (found := _GRANTED.match(message)):
            return BrokerEvent(r.at, CONNECTION_OPENED, BROKER_LOG, connection=found["a"] or found["b"],
                               pid=r.pid, connection_name=found["an"] or found["bn"], vhost=found["vhost"],
                               user=found["user"])
        if message.startswith("closing AMQP connection") and (found := _CLOSING.match(message)):
            return self._closing(r, found)
        return None

    def _channel_error(self, r: _Record, message: str) -> BrokerEvent | None:
        found = _CHANNEL_ERROR.match(message)
        if found is None:
            return None
        pid, conn, vhost, user, channel, operation, reason, text = found.groups()
        timed_out = _TIMED_OUT.match(text) if text.startswith("delivery acknowledgement") else None
        if timed_out is None:
            queue = _QUEUE_NAMED.search(text) if "queue '" in text else None  # most say no queue: not searched
            return BrokerEvent(r.at, CHANNEL_ERROR, BROKER_LOG, connection=conn, pid=pid, vhost=vhost, user=user,
                               channel=int(channel), operation=None if operation == "none" else operation,
                               reason=reason, text=text, queue=queue[1] if queue else None)
        warning = self._timeouts.pop(r.pid, None)
        return BrokerEvent(r.at, CONSUMER_TIMEOUT, BROKER_LOG, connection=conn, pid=pid, vhost=vhost, user=user,
                           channel=int(channel), reason=reason, text=text, timeout_ms=int(timed_out[1]),
                           queue=warning["queue"] if warning else None,
                           # 3.10 prints a bare number where 4.x quotes the tag; recorded, it was not the
                           # consumer's tag (that was 'stalled-classic-consumer'): it is not taken for one.
                           consumer_tag=warning["tag"] if warning else None,
                           delivery_tag=int(warning["delivery_tag"]) if warning and warning["delivery_tag"] else None)

    def _closing(self, r: _Record, found: re.Match) -> BrokerEvent:
        why = (found["why"] or "").strip()
        common = dict(connection=found["conn"], pid=r.pid, connection_name=found["name"], vhost=found["vhost"],
                      user=found["user"])
        if error := _AMQP_ERROR.search(why):
            return BrokerEvent(r.at, CONNECTION_ERROR, BROKER_LOG, reason=error[1], text=error[2], **common)
        if term := _ERLANG_TERM.match(why):  # {handshake_timeout,handshake}: closed before the client spoke AMQP
            return BrokerEvent(r.at, CONNECTION_ERROR, BROKER_LOG, reason=term[1], text=" ".join(why.split()),
                               **common)
        if not why:
            return BrokerEvent(r.at, CONNECTION_CLOSED, BROKER_LOG, reason="closed", **common)
        if "unexpectedly closed TCP connection" in why:
            reason = "dropped"
        elif _HEARTBEATS.search(why):
            reason = "missed heartbeats"
        else:
            reason = "error"
        return BrokerEvent(r.at, CONNECTION_CLOSED, BROKER_LOG, reason=reason, text=" ".join(why.split()), **common)

    def _connection_exception(self, r: _Record, found: re.Match) -> BrokerEvent:
        why = found["why"].strip()
        operation = None
        if exception := _OPERATION.match(why):
            operation, reason, why = exception.groups()
        else:
            reason = next((name for words, name in _REFUSALS if words in why), "error")
        return BrokerEvent(r.at, CONNECTION_ERROR, BROKER_LOG, connection=found["conn"], pid=r.pid,
                           connection_name=found["name"], vhost=found["vhost"], user=found["user"],
                           channel=int(found["channel"]) if found["channel"] else None, operation=operation,
                           reason=reason, text=" ".join(why.split()))

    @staticmethod
    def _dead_letter_cycle(r: _Record, message: str) -> BrokerEvent | None:
        """The queues of the cycle as the broker lists them: the queue the message was being dead-lettered into,
        then those it died in, the most recent first (3.10 and 4.x alike). It was dropped as it was dead-lettered
        out of the second, the queue it died in last. Neither release names the vhost."""
        listed = message[message.find("["):]
        queues = tuple(m[1] if m[2] is None else _decoded(m[2]) for m in _BINARY.finditer(listed))
        if len(queues) < 2:
            return None
        return BrokerEvent(r.at, MESSAGE_DROPPED, BROKER_LOG, pid=r.pid, reason=DEAD_LETTER_CYCLE, queue=queues[1],
                           queues=queues, text=" ".join(message.split()))


def _decoded(numbers: str) -> str:
    """A name ~p printed as bytes (<<99,97,102,195,169>>): its UTF-8 text."""
    return bytes(int(n) for n in numbers.split(",")).decode("utf-8", "replace")
