package io.leasehold.client;

import java.util.ArrayList;
import java.util.List;

/**
 * A {@code text/event-stream} parser (the WHATWG rules leasehold's stream needs): {@code event:},
 * {@code id:}, {@code data:} (joined with newlines); a blank line dispatches; lines starting with
 * {@code :} are comments; {@code retry:} and unknown fields are ignored.
 */
final class SseParser {
    record RawEvent(String event, String data, String id) {}

    /** The bound on one event's data; a longer event fails the stream. */
    static final int MAX_EVENT_CHARS = 1 << 20;

    private String lastEventId;
    private String event = "";
    private final List<String> data = new ArrayList<>();
    private int size;

    SseParser(String lastEventId) {
        this.lastEventId = lastEventId;
    }

    String lastEventId() {
        return lastEventId;
    }

    /** Feed one line (without its ending); returns the event it completes, or null. */
    RawEvent feed(String line) {
        if (line.isEmpty()) {
            if (data.isEmpty()) {
                event = "";
                return null;
            }
            RawEvent out = new RawEvent(event.isEmpty() ? "message" : event, String.join("\n", data), lastEventId);
            event = "";
            data.clear();
            size = 0;
            return out;
        }
        if (line.startsWith(":")) {
            return null;
        }
        int colon = line.indexOf(':');
        String name = colon < 0 ? line : line.substring(0, colon);
        String value = colon < 0 ? "" : line.substring(colon + 1);
        if (value.startsWith(" ")) {
            value = value.substring(1);
        }
        switch (name) {
            case "event":
                event = value;
                break;
            case "data":
                size += value.length() + 1;
                if (size > MAX_EVENT_CHARS) {
                    throw new IllegalStateException("an event over " + MAX_EVENT_CHARS + " characters");
                }
                data.add(value);
                break;
            case "id":
                if (value.indexOf('\0') < 0) {
                    lastEventId = value;
                }
                break;
            default:
        }
        return null;
    }
}
