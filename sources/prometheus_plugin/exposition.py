"""Reading the samples of a Prometheus text exposition (format 0.0.4), the few names asked for.

prometheus_client's parser is the reference, and the tests hold this reader to it sample for sample. It is
not used here because it was the poll's bottleneck: at 5,000 queues and 600 channels it takes about 600 ms
for the plugin's 2.6 MB, this reader 130 ms (docs/benchmarks.md). The gain is matching each line with one
compiled expression and parsing the labels only of the series the model reads. Comments are skipped (the
model knows what each series means); `declared` reads the # TYPE lines apart, to tell a family the answer
left out.
"""

from __future__ import annotations

import io
import math
import re
from collections import defaultdict
from collections.abc import Collection

Samples = dict[str, list[tuple[dict[str, str], float]]]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_PAIR = r'[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*'
# name, {labels} (greedy up to the last brace: a label value may hold braces), value, optional timestamp.
_LINE = re.compile(rf"({_NAME})[ \t]*(?:\{{(.*)\}})?[ \t]*([^ \t{{}}]+)(?:[ \t]+-?[0-9]+)?[ \t]*")
_LABELS = re.compile(rf"(?:{_PAIR}(?:,{_PAIR})*,?[ \t]*)?")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")
_TYPE = re.compile(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*)", re.MULTILINE)


class MalformedExposition(ValueError):
    """The text is not a Prometheus exposition; the message quotes the first line that is not."""


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], value) if "\\" in value else value


def read_samples(text: str, names: Collection[str] | None = None) -> Samples:
    """{sample name: [(labels, value)]} for the samples named in `names` (all when None), non-finite
    values left out; MalformedExposition at the first line that is neither a comment nor a sample."""
    samples: Samples = defaultdict(list)
    # Line by line from a StringIO, not text.split(): one split of a large broker's answer (19 MB at 50,000
    # queues) holds the GIL for 60 ms, which a scrape served meanwhile would wait out.
    for number, line in enumerate(io.StringIO(text), 1):
        line = line.rstrip("\n")
        if not line or line[0] == "#" or line.isspace():
            continue
        m = _LINE.fullmatch(line)
        if m is None:
            raise MalformedExposition(f"line {number} is not a sample: {line[:60]!r}")
        name, labels, raw = m.groups()
        if names is not None and name not in names:
            continue
        try:
            value = float(raw)
        except ValueError:
            raise MalformedExposition(f"line {number} has no number: {line[:60]!r}") from None
        if not math.isfinite(value):
            continue
        if labels:
            if _LABELS.fullmatch(labels) is None:
                raise MalformedExposition(f"line {number} has malformed labels: {line[:60]!r}")
            samples[name].append(({k: _unescape(v) for k, v in _LABEL.findall(labels)}, value))
        else:
            samples[name].append(({}, value))
    return samples


def declared(text: str) -> frozenset[str]:
    """The names the exposition declares with # TYPE, samples or not: a family the server knows but has
    nothing in is declared all the same, one it does not know is not."""
    return frozenset(m[1] for m in _TYPE.finditer(text))  # match by match: no single long hold of the GIL
