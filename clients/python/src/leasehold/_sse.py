"""A ``text/event-stream`` parser (the WHATWG rules leasehold's stream needs):
``event:``, ``id:``, ``data:`` (joined with newlines), a blank line dispatches,
lines starting with ``:`` are comments, ``retry:`` and unknown fields are ignored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class RawEvent:
    event: str
    data: str
    id: Optional[str]


@dataclass
class SseParser:
    """Feed it lines (without their line ending); it returns the events they complete."""

    last_event_id: Optional[str] = None
    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _has_data: bool = False

    def feed(self, line: str) -> Optional[RawEvent]:
        if line == "":
            if not self._has_data:
                self._event = ""
                return None
            out = RawEvent(self._event or "message", "\n".join(self._data), self.last_event_id)
            self._event, self._data, self._has_data = "", [], False
            return out
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id" and "\0" not in value:
            self.last_event_id = value
        return None
