package io.leasehold.client;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.leasehold.client.Outcomes.AcquireOutcome;
import io.leasehold.client.Outcomes.Acquired;
import io.leasehold.client.Outcomes.ReleaseOutcome;
import io.leasehold.client.Outcomes.RenewOutcome;
import io.leasehold.client.Outcomes.Replayed;
import io.leasehold.client.Records.Inspection;
import io.leasehold.client.Records.LeaseRecord;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;

/**
 * A leasehold client over one {@link HttpClient} (DESIGN §2, §3, §15): one method per verb, each
 * answering a typed outcome or throwing what the caller may assume ({@link UnavailableException}:
 * nothing applied; {@link OverloadedException}: nothing applied; {@link IndeterminateException}:
 * retry with the same attempt). Blocking methods hold no lock while they wait (friendly to virtual
 * threads); each has a {@code …Async} variant answering a {@link CompletableFuture}.
 */
public final class LeaseholdClient implements AutoCloseable {
    /** Replies larger than this are off the contract. */
    static final int MAX_REPLY_BYTES = 1 << 20;
    static final String OWNER_TOKEN_HEADER = "Lease-Owner-Token";
    static final String OPERATION_ID_HEADER = "Lease-Operation-Id";

    private final String baseUrl;
    private final String apiKey;
    private final Duration timeout;
    final Duration connectTimeout;
    private final Duration driftBudget;
    private final double driftFraction;
    final HttpClient http;

    private LeaseholdClient(Builder b) {
        this.baseUrl = b.baseUrl;
        this.apiKey = b.apiKey;
        this.timeout = b.timeout;
        this.connectTimeout = b.connectTimeout;
        this.driftBudget = b.driftBudget;
        this.driftFraction = b.driftFraction;
        HttpClient.Builder hb = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(b.connectTimeout)
                .followRedirects(HttpClient.Redirect.NEVER);
        if (b.sslContext != null) {
            hb.sslContext(b.sslContext);
        }
        this.http = hb.build();
    }

    /** A client of the service at {@code baseUrl} ({@code http://} or {@code https://}). */
    public static Builder builder(String baseUrl) {
        return new Builder(baseUrl);
    }

    /** Options of a {@link LeaseholdClient}. */
    public static final class Builder {
        private final String baseUrl;
        private String apiKey;
        private Duration timeout = Duration.ofSeconds(5);
        private Duration connectTimeout = Duration.ofSeconds(1);
        private Duration driftBudget = Duration.ofMillis(10);
        private double driftFraction = 0.01;
        private javax.net.ssl.SSLContext sslContext;

        Builder(String baseUrl) {
            URI u;
            try {
                u = URI.create(baseUrl);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("base URL must be an absolute http:// or https:// URL", e);
            }
            if (!("http".equals(u.getScheme()) || "https".equals(u.getScheme())) || u.getHost() == null
                    || u.getQuery() != null || u.getFragment() != null) {
                throw new IllegalArgumentException(
                        "base URL " + baseUrl + " must be an absolute http:// or https:// URL without query or fragment");
            }
            this.baseUrl = baseUrl.replaceAll("/+$", "");
        }

        /** Sent as {@code Authorization: Bearer <key>}; never logged. */
        public Builder apiKey(String key) {
            if (key != null && !key.chars().allMatch(c -> c > 0x20 && c < 0x7f)) {
                throw new IllegalArgumentException("the API key must be visible ASCII");
            }
            this.apiKey = key;
            return this;
        }

        /** How long one request may take (an acquire adds its wait). Default 5 s. */
        public Builder timeout(Duration d) {
            this.timeout = d;
            return this;
        }

        /** How long connecting may take (a connect failure is unavailable). Default 1 s. */
        public Builder connectTimeout(Duration d) {
            this.connectTimeout = d;
            return this;
        }

        /** The drift budget (at least the service's {@code LEASEHOLD_DRIFT_BUDGET_MS}); default 10 ms. */
        public Builder driftBudget(Duration d) {
            this.driftBudget = d;
            return this;
        }

        /** The drift's share of the TTL, 0 to 0.5; default 0.01 (DESIGN §14). */
        public Builder driftFraction(double f) {
            if (!(f >= 0 && f <= 0.5)) {
                throw new IllegalArgumentException("driftFraction must be within 0..0.5");
            }
            this.driftFraction = f;
            return this;
        }

        /** For {@code https://}: the trust (and client certificate) to use; default the JDK's. */
        public Builder sslContext(javax.net.ssl.SSLContext context) {
            this.sslContext = context;
            return this;
        }

        public LeaseholdClient build() {
            return new LeaseholdClient(this);
        }
    }

    public String baseUrl() {
        return baseUrl;
    }

    /** The drift allowed a lease of {@code ttl}: max(drift budget, fraction × ttl) (DESIGN §14). */
    public Duration driftFor(Duration ttl) {
        long byFraction = (long) (ttl.toNanos() * driftFraction);
        return Duration.ofNanos(Math.max(driftBudget.toNanos(), byFraction));
    }

    private long driftNanos(LeaseRecord record, long ttlNanos) {
        long granted = record.ttlMs() * 1_000_000L;
        return driftFor(Duration.ofNanos(granted > 0 ? Math.min(granted, ttlNanos) : ttlNanos)).toNanos();
    }

    @Override
    public void close() {
        // java.net.http.HttpClient in Java 17 has no close(); its threads end when it is unreachable.
    }

    // -- requests ------------------------------------------------------------------------

    String leaseUrl(String purpose, String digest) {
        return baseUrl + "/leases/" + Names.checkPurpose(purpose) + "/" + Names.checkDigest(digest);
    }

    HttpRequest.Builder request(String url, Attempt attempt, Duration extra) {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url)).timeout(timeout.plus(extra));
        if (apiKey != null) {
            b.header("Authorization", "Bearer " + apiKey);
        }
        if (attempt != null) {
            b.header(OWNER_TOKEN_HEADER, attempt.ownerToken());
            b.header(OPERATION_ID_HEADER, attempt.operationId());
        }
        return b;
    }

    private static HttpRequest.BodyPublisher json(ObjectNode body) {
        try {
            return HttpRequest.BodyPublishers.ofByteArray(Wire.JSON.writeValueAsBytes(body));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("an ObjectNode always serialises", e);
        }
    }

    private HttpRequest build(String method, String url, Attempt attempt, ObjectNode body, Duration extra) {
        HttpRequest.Builder b = request(url, attempt, extra);
        if (body != null) {
            b.header("Content-Type", "application/json").method(method, json(body));
        } else {
            b.method(method, HttpRequest.BodyPublishers.noBody());
        }
        return b.build();
    }

    Wire.Reply call(HttpRequest req, String op) {
        try {
            HttpResponse<byte[]> r = http.send(req, BoundedBody.handler(MAX_REPLY_BYTES));
            return reply(r, op);
        } catch (IOException e) {
            throw Wire.transportError(e, op);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            // It may have been sent: as uncertain as a lost reply.
            throw new IndeterminateException(op, "interrupted", 0, e);
        }
    }

    CompletableFuture<Wire.Reply> callAsync(HttpRequest req, String op) {
        return http.sendAsync(req, BoundedBody.handler(MAX_REPLY_BYTES)).handle((r, e) -> {
            if (e != null) {
                Throwable t = Lease.unwrap(e);
                if (t instanceof LeaseholdException le) {
                    throw le;
                }
                throw Wire.transportError(t, op);
            }
            return reply(r, op);
        });
    }

    private static Wire.Reply reply(HttpResponse<byte[]> r, String op) {
        if (r.body() == null) {
            throw new IndeterminateException(op, "unexpected_reply", r.statusCode(), null);
        }
        return Wire.Reply.of(r.statusCode(), r.body());
    }

    // -- verbs ---------------------------------------------------------------------------

    /** {@code POST /attempts}: a fresh owner token for {@code operationId}. Stateless on the server. */
    public Attempt attempt(String operationId) {
        Names.checkOperationId(operationId);
        ObjectNode body = Wire.JSON.createObjectNode().put("operationId", operationId);
        return Wire.attemptCreated(call(build("POST", baseUrl + "/attempts", null, body, Duration.ZERO), operationId),
                operationId);
    }

    /**
     * {@code PUT /leases/{purpose}/{digest}}: acquire for {@code options.ttl()}, waiting up to
     * {@code options.waitFor()} server-side. A held lease comes back with a {@link Lease} whose local
     * validity counts from this request's send (plus {@code waitedMs}). Throws
     * {@link IndeterminateException} when it may have applied: retry with the <em>same</em> attempt.
     */
    public AcquireOutcome acquire(String purpose, String digest, Attempt attempt, AcquireOptions options) {
        String url = leaseUrl(purpose, digest);
        long sent = System.nanoTime();
        Wire.Reply reply = call(build("PUT", url, attempt, Wire.acquireBody(options), options.waitFor()),
                attempt.operationId());
        return held(reply, purpose, digest, attempt, options, sent);
    }

    /** {@link #acquire} without blocking. */
    public CompletableFuture<AcquireOutcome> acquireAsync(String purpose, String digest, Attempt attempt,
            AcquireOptions options) {
        return guard(() -> {
            String url = leaseUrl(purpose, digest);
            long sent = System.nanoTime();
            return callAsync(build("PUT", url, attempt, Wire.acquireBody(options), options.waitFor()),
                    attempt.operationId()).thenApply(r -> held(r, purpose, digest, attempt, options, sent));
        });
    }

    private AcquireOutcome held(Wire.Reply reply, String purpose, String digest, Attempt attempt,
            AcquireOptions options, long sent) {
        Wire.AcquireAnswer a = Wire.acquireAnswer(reply, purpose, digest, attempt.operationId());
        if (a.refusal() != null) {
            return a.refusal();
        }
        long ttl = options.ttl().toMillis() * 1_000_000L;
        long drift = driftNanos(a.record(), ttl);
        if ("acquired".equals(a.outcome())) {
            long start = sent + (a.waitedMs() == null ? 0 : a.waitedMs() * 1_000_000L);
            return new Acquired(a.record(), new Lease(this, attempt, a.record(), start, ttl, drift, start),
                    a.waitedMs());
        }
        return new Replayed(a.record(), new Lease(this, attempt, a.record(), sent, ttl, drift, null));
    }

    private static ObjectNode renewBody(Duration ttl, String holder) {
        ObjectNode body = Wire.JSON.createObjectNode().put("ttlMs", ttl.toMillis());
        if (holder != null) {
            body.put("holder", Names.checkHolder(holder));
        }
        return body;
    }

    /** {@code PATCH}: reset the TTL (and the public {@code holder} label unless null). A {@link Lease} tracks it for you. */
    public RenewOutcome renew(String purpose, String digest, Attempt attempt, Duration ttl, String holder) {
        Wire.Reply r = call(build("PATCH", leaseUrl(purpose, digest), attempt, renewBody(ttl, holder), Duration.ZERO),
                attempt.operationId());
        return Wire.renewAnswer(r, purpose, digest, attempt.operationId());
    }

    public CompletableFuture<RenewOutcome> renewAsync(String purpose, String digest, Attempt attempt, Duration ttl,
            String holder) {
        return guard(() -> callAsync(
                build("PATCH", leaseUrl(purpose, digest), attempt, renewBody(ttl, holder), Duration.ZERO),
                attempt.operationId()).thenApply(r -> Wire.renewAnswer(r, purpose, digest, attempt.operationId())));
    }

    /** {@code DELETE}: release (idempotent). */
    public ReleaseOutcome release(String purpose, String digest, Attempt attempt) {
        Wire.Reply r = call(build("DELETE", leaseUrl(purpose, digest), attempt, null, Duration.ZERO),
                attempt.operationId());
        return Wire.releaseAnswer(r, attempt.operationId());
    }

    public CompletableFuture<ReleaseOutcome> releaseAsync(String purpose, String digest, Attempt attempt) {
        return guard(() -> callAsync(build("DELETE", leaseUrl(purpose, digest), attempt, null, Duration.ZERO),
                attempt.operationId()).thenApply(r -> Wire.releaseAnswer(r, attempt.operationId())));
    }

    /** {@code GET}: a read-only view ({@code heldBy} when {@code attempt} is not null). */
    public Inspection inspect(String purpose, String digest, Attempt attempt) {
        String op = attempt == null ? "inspect" : attempt.operationId();
        return Wire.inspected(call(build("GET", leaseUrl(purpose, digest), attempt, null, Duration.ZERO), op), op);
    }

    public CompletableFuture<Inspection> inspectAsync(String purpose, String digest, Attempt attempt) {
        String op = attempt == null ? "inspect" : attempt.operationId();
        return guard(() -> callAsync(build("GET", leaseUrl(purpose, digest), attempt, null, Duration.ZERO), op)
                .thenApply(r -> Wire.inspected(r, op)));
    }

    private String changedUrl(String purpose, String digest, String version, Duration wait) {
        return leaseUrl(purpose, digest) + "?changedSince=" + URLEncoder.encode(version, StandardCharsets.UTF_8)
                + "&waitMs=" + wait.toMillis();
    }

    /** The long-poll: answers once the version differs from {@code version}, or after {@code wait} unchanged. */
    public Inspection inspectChanged(String purpose, String digest, String version, Duration wait) {
        return Wire.inspected(call(build("GET", changedUrl(purpose, digest, version, wait), null, null, wait),
                "inspect"), "inspect");
    }

    public CompletableFuture<Inspection> inspectChangedAsync(String purpose, String digest, String version,
            Duration wait) {
        return guard(() -> callAsync(build("GET", changedUrl(purpose, digest, version, wait), null, null, wait),
                "inspect").thenApply(r -> Wire.inspected(r, "inspect")));
    }

    /**
     * {@code GET …/events} over server-sent events: a {@code state} event, then one per change. After a
     * cut it reconnects with {@code Last-Event-ID} (at most {@code maxReconnects} failures in a row).
     * Close the {@link Watch} to stop.
     */
    public Watch watch(String purpose, String digest, String lastEventId) {
        return new Watch(this, leaseUrl(purpose, digest) + "/events", lastEventId, 5, Duration.ofMillis(500));
    }

    /**
     * Acquires with one attempt (an indeterminate answer or a cut connection is retried with the
     * <em>same</em> attempt), keeps the lease with a watchdog and signals its loss (see
     * {@link LockHandle}). Throws {@link NotAcquiredException} when someone else kept it through the wait.
     */
    public LockHandle lock(String purpose, String digest, LockOptions options) {
        return LockHandle.acquire(this, purpose, digest, options);
    }

    /**
     * Runs {@code work} while holding the lease: the calling thread is interrupted if the lease is lost
     * (at the latest one stop margin before local validity ends). Returns what the work returned;
     * throws {@link LeaseLostException} (the work's exception as its cause) when the lease was lost
     * meanwhile, even if the work finished.
     */
    public <T> T withLock(String purpose, String digest, LockOptions options, Callable<T> work) throws Exception {
        LockHandle lock = lock(purpose, digest, options);
        T result;
        try {
            result = work.call();
        } catch (Exception e) {
            lock.close();
            if (lock.lost()) {
                throw lock.lostException(e);
            }
            throw e;
        }
        lock.close();
        if (lock.lost()) {
            throw lock.lostException(null);
        }
        return result;
    }

    /** {@link #withLock} on {@code executor}'s thread (e.g. {@code Executors.newCachedThreadPool()}). */
    public <T> CompletableFuture<T> withLockAsync(String purpose, String digest, LockOptions options, Callable<T> work,
            java.util.concurrent.Executor executor) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                return withLock(purpose, digest, options, work);
            } catch (RuntimeException e) {
                throw e;
            } catch (Exception e) {
                throw new java.util.concurrent.CompletionException(e);
            }
        }, executor);
    }

    /** Turns a synchronous argument check into a failed future. */
    private static <T> CompletableFuture<T> guard(Callable<CompletableFuture<T>> start) {
        try {
            return start.call();
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(e);
        } catch (Exception e) {
            return CompletableFuture.failedFuture(e);
        }
    }
}
