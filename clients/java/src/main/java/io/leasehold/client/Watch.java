package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;
import io.leasehold.client.Records.WatchEvent;
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * A watch of one lease over server-sent events ({@code GET …/events}, DESIGN §9): {@link #next()}
 * blocks for the next event. After a cut it reconnects with {@code Last-Event-ID} (the service then
 * sends a {@code state} event only when something changed meanwhile); {@code maxReconnects} failed
 * reconnections in a row throw. A stream silent for 45 s (the service comments every 15 s at most)
 * counts as cut. Not for use from several threads at once, except {@link #close()}.
 */
public final class Watch implements AutoCloseable {
    static final Duration READ_TIMEOUT = Duration.ofSeconds(45);
    private static final ScheduledExecutorService IDLE = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "leasehold-watch-idle");
        t.setDaemon(true);
        return t;
    });

    private final LeaseholdClient client;
    private final String url;
    private final int maxReconnects;
    private final Duration retryPeriod;
    private String lastId;
    private int failures;
    private boolean connected;
    private volatile boolean closed;
    private volatile InputStream stream;
    private volatile long lastRead;
    private InputStream reader;
    private SseParser parser;
    private final ScheduledFuture<?> idleCheck;

    Watch(LeaseholdClient client, String url, String lastEventId, int maxReconnects, Duration retryPeriod) {
        this.client = client;
        this.url = url;
        this.lastId = lastEventId;
        this.maxReconnects = maxReconnects;
        this.retryPeriod = retryPeriod;
        this.idleCheck = IDLE.scheduleAtFixedRate(this::checkIdle, 5, 5, TimeUnit.SECONDS);
    }

    private void checkIdle() {
        InputStream s = stream;
        if (s != null && System.nanoTime() - lastRead > READ_TIMEOUT.toNanos()) {
            closeQuietly(s);
        }
    }

    /** The id of the last event seen (the version), to resume a later watch from. */
    public String lastEventId() {
        return lastId;
    }

    private void connect() {
        HttpRequest.Builder b = client.request(url, null, Duration.ZERO).header("Accept", "text/event-stream").GET();
        if (lastId != null) {
            b.header("Last-Event-ID", lastId);
        }
        HttpResponse<InputStream> r;
        try {
            r = client.http.send(b.build(), HttpResponse.BodyHandlers.ofInputStream());
        } catch (IOException e) {
            throw Wire.transportError(e, "watch");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IndeterminateException("watch", "interrupted", 0, e);
        }
        if (r.statusCode() != 200) {
            byte[] body;
            try (InputStream in = r.body()) {
                body = in.readNBytes(LeaseholdClient.MAX_REPLY_BYTES);
            } catch (IOException e) {
                body = new byte[0];
            }
            throw Wire.Reply.of(r.statusCode(), body).failure("watch");
        }
        stream = r.body();
        lastRead = System.nanoTime();
        reader = new BufferedInputStream(stream);
        parser = new SseParser(lastId);
        connected = true;
        failures = 0;
    }

    /** The next event, blocking; null once closed. */
    public WatchEvent next() {
        while (!closed) {
            try {
                if (reader == null) {
                    connect();
                }
                String line = readLine(reader);
                lastRead = System.nanoTime();
                if (line == null) {
                    throw new IOException("the stream ended");
                }
                SseParser.RawEvent raw = parser.feed(line);
                if (raw != null) {
                    lastId = raw.id();
                    return event(raw);
                }
            } catch (IOException | LeaseholdException e) {
                dropStream();
                if (closed) {
                    return null;
                }
                LeaseholdException error = e instanceof LeaseholdException le ? le : Wire.transportError(e, "watch");
                if (!connected || failures >= maxReconnects
                        || error instanceof RejectedException) {
                    throw error;
                }
                failures++;
                try {
                    Thread.sleep(retryPeriod.toMillis()); // back-off before reconnecting
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    close();
                    return null;
                }
            }
        }
        return null;
    }

    /** One line (ended by CR, LF or CRLF) of at most {@link SseParser#MAX_EVENT_CHARS} bytes; null at the end. */
    static String readLine(InputStream in) throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream();
        while (true) {
            int b = in.read();
            if (b < 0) {
                return line.size() == 0 ? null : line.toString(StandardCharsets.UTF_8);
            }
            if (b == '\n') {
                return line.toString(StandardCharsets.UTF_8);
            }
            if (b == '\r') {
                in.mark(1);
                if (in.read() != '\n') {
                    in.reset();
                }
                return line.toString(StandardCharsets.UTF_8);
            }
            if (line.size() >= SseParser.MAX_EVENT_CHARS) {
                throw new IOException("an event-stream line over " + SseParser.MAX_EVENT_CHARS + " bytes");
            }
            line.write(b);
        }
    }

    private WatchEvent event(SseParser.RawEvent raw) {
        JsonNode body;
        try {
            body = Wire.JSON.readTree(raw.data());
        } catch (IOException e) {
            body = null;
        }
        Wire.Reply reply = new Wire.Reply(200, body == null ? Wire.JSON.createObjectNode() : body);
        if (body == null || !body.isObject()) {
            throw reply.unexpected("watch");
        }
        return new WatchEvent(raw.event(), raw.id(), Wire.inspectionOf(body, reply, "watch"));
    }

    private void dropStream() {
        InputStream s = stream;
        stream = null;
        reader = null;
        if (s != null) {
            closeQuietly(s);
        }
    }

    private static void closeQuietly(InputStream s) {
        try {
            s.close();
        } catch (IOException e) {
            // closing a cut stream: nothing left to do
        }
    }

    /** Stops the watch; a blocked {@link #next()} returns null. */
    @Override
    public void close() {
        closed = true;
        idleCheck.cancel(false);
        InputStream s = stream;
        if (s != null) {
            closeQuietly(s);
        }
    }
}
