"""OTLP trace requests, protobuf or JSON, decoded by opentelemetry-proto into the spans they carry.

OTLP/JSON is protobuf's JSON mapping but for one thing: trace and span ids are hex, not base64. They are turned
into base64 before protobuf's own parser reads the document, so one parser reads both encodings.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterator

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .shapes import attributes

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
UNKNOWN_SERVICE = "unknown_service"  # what the SDKs name a service that set no service.name


class BadRequest(ValueError):
    """A request that is no OTLP trace request: the message says why, in a line."""


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """The request body unpacked per its Content-Encoding (gzip, deflate or none), at most `limit` bytes.

    Raises BadRequest for an unknown encoding or a body that does not unpack; OverflowError past `limit`."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise BadRequest(f"Content-Encoding {encoding!r} is not gzip, deflate or identity")
    unpacker = zlib.decompressobj(31 if encoding == "gzip" else 15)
    try:
        out = unpacker.decompress(body, limit + 1)
    except zlib.error as e:
        raise BadRequest(f"the {encoding} body does not unpack: {e}") from None
    if len(out) > limit:
        raise OverflowError(limit)
    return out


def decode(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """An ExportTraceServiceRequest from a request body; `content_type` picks protobuf or JSON.

    Raises BadRequest, with one line saying why, for anything else."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    request = ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(body)
        except DecodeError as e:
            raise BadRequest(f"malformed OTLP protobuf: {e}") from None
        return request
    if kind == JSON:
        try:
            document = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BadRequest(f"malformed OTLP JSON: {e}") from None
        except RecursionError:
            raise BadRequest("malformed OTLP JSON: nested too deeply") from None
        if not isinstance(document, dict):
            raise BadRequest("malformed OTLP JSON: the document is no object")
        try:
            _ids_to_base64(document)
            json_format.ParseDict(document, request, ignore_unknown_fields=True)
        except (json_format.ParseError, BadRequest) as e:
            raise BadRequest(f"malformed OTLP JSON: {e}") from None
        except RecursionError:  # OTLP nests six deep; a document can nest as deep as json.loads allows
            raise BadRequest("malformed OTLP JSON: nested too deeply") from None
        return request
    raise BadRequest(f"Content-Type {content_type or '(none)'!r} is neither {PROTOBUF} nor {JSON}")


def _ids_to_base64(node) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise BadRequest(f"{key} {value[:40]!r} is not hex") from None
            else:
                _ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _ids_to_base64(item)


def spans(request: ExportTraceServiceRequest) -> Iterator[tuple[str, object]]:
    """Each span of the request with its resource's service.name."""
    for resource_spans in request.resource_spans:
        service = attributes(resource_spans.resource.attributes).get("service.name") or UNKNOWN_SERVICE
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield str(service), span

