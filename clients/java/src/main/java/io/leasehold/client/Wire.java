package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.leasehold.client.Outcomes.AcquireOutcome;
import io.leasehold.client.Outcomes.AlreadyAbsent;
import io.leasehold.client.Outcomes.Contended;
import io.leasehold.client.Outcomes.LimitMismatch;
import io.leasehold.client.Outcomes.Lost;
import io.leasehold.client.Outcomes.NotOwner;
import io.leasehold.client.Outcomes.OwnerOperationConflict;
import io.leasehold.client.Outcomes.ReleaseOutcome;
import io.leasehold.client.Outcomes.Released;
import io.leasehold.client.Outcomes.RenewOutcome;
import io.leasehold.client.Outcomes.Renewed;
import io.leasehold.client.Records.FieldError;
import io.leasehold.client.Records.Inspection;
import io.leasehold.client.Records.LeaseRecord;
import io.leasehold.client.Records.Permit;
import java.io.IOException;
import java.net.ConnectException;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpTimeoutException;
import java.util.ArrayList;
import java.util.List;
import javax.net.ssl.SSLException;

/** The wire: how every reply (or its absence) becomes an outcome or an exception. No I/O here. */
final class Wire {
    static final ObjectMapper JSON = new ObjectMapper();

    private Wire() {}

    /** A reply off the contract (a member missing or of the wrong type). */
    static final class Off extends Exception {
        private static final long serialVersionUID = 1L;

        Off() {
            super(null, null, false, false);
        }
    }

    /** A reply that arrived: its status and, when it was a JSON object, its members. */
    record Reply(int status, JsonNode body) {
        static Reply of(int status, byte[] bytes) {
            JsonNode body;
            try {
                body = bytes.length == 0 ? null : JSON.readTree(bytes);
            } catch (IOException e) {
                body = null;
            }
            return new Reply(status, body != null && body.isObject() ? body : JSON.createObjectNode());
        }

        String outcome() {
            JsonNode v = body.get("outcome");
            return v != null && v.isTextual() ? v.asText() : "";
        }

        IndeterminateException unexpected(String op) {
            return new IndeterminateException(op, "unexpected_reply", status, null);
        }

        /** The shared failures, a rejection, or (anything else) an unexpected reply. */
        LeaseholdException failure(String op) {
            String outcome = outcome();
            Long retryAfter;
            try {
                retryAfter = optLong(body, "retryAfterMs");
            } catch (Off e) {
                retryAfter = null;
            }
            switch (outcome) {
                case "unavailable":
                    return new UnavailableException("service", retryAfter, null);
                case "overloaded":
                    return new OverloadedException(retryAfter);
                case "indeterminate":
                case "request_timeout":
                    // A request that overran the service's own timeout may have reached the store.
                    return new IndeterminateException(op, "service", status, null);
                default:
            }
            if (status >= 400 && status < 500) {
                List<FieldError> errors = new ArrayList<>();
                JsonNode list = body.get("errors");
                if (list != null && list.isArray()) {
                    for (JsonNode e : list) {
                        errors.add(new FieldError(e.path("field").asText(""), e.path("message").asText("")));
                    }
                }
                String detail = body.path("detail").asText("");
                String name = outcome.isEmpty() ? "<none>" : outcome;
                return "invalid_request".equals(outcome)
                        ? new InvalidRequestException(status, name, detail, errors)
                        : new RejectedException(status, name, detail, errors);
            }
            return unexpected(op);
        }
    }

    /** A failed exchange, classified: nothing written → unavailable; possibly written → indeterminate. */
    static LeaseholdException transportError(Throwable e, String op) {
        Throwable t = e;
        while (t instanceof java.util.concurrent.CompletionException && t.getCause() != null) {
            t = t.getCause();
        }
        if (t instanceof HttpConnectTimeoutException || t instanceof ConnectException) {
            return new UnavailableException("connect", null, t);
        }
        if (t instanceof SSLException) {
            return new UnavailableException("tls", null, t);
        }
        if (t instanceof HttpTimeoutException) {
            return new IndeterminateException(op, "timeout", 0, t);
        }
        return new IndeterminateException(op, "connection_lost", 0, t);
    }

    static Long optLong(JsonNode obj, String name) throws Off {
        JsonNode v = obj.get(name);
        if (v == null || v.isNull()) {
            return null;
        }
        if (!v.isIntegralNumber() || !v.canConvertToLong()) {
            throw new Off();
        }
        return v.asLong();
    }

    static long reqLong(JsonNode obj, String name) throws Off {
        Long v = optLong(obj, name);
        if (v == null) {
            throw new Off();
        }
        return v;
    }

    static String optStr(JsonNode obj, String name) throws Off {
        JsonNode v = obj.get(name);
        if (v == null || v.isNull()) {
            return null;
        }
        if (!v.isTextual()) {
            throw new Off();
        }
        return v.asText();
    }

    static String reqStr(JsonNode obj, String name) throws Off {
        String v = optStr(obj, name);
        if (v == null) {
            throw new Off();
        }
        return v;
    }

    static ObjectNode acquireBody(AcquireOptions o) {
        ObjectNode body = JSON.createObjectNode();
        body.put("ttlMs", o.ttl().toMillis());
        if (o.waitFor().toMillis() > 0) {
            body.put("waitMs", o.waitFor().toMillis());
        }
        if (o.holder() != null) {
            body.put("holder", o.holder());
        }
        if (o.limit() != 1) {
            body.put("limit", o.limit());
        }
        if (!"exclusive".equals(o.mode())) {
            body.put("mode", o.mode());
        }
        if (o.lockDelay().toMillis() > 0) {
            body.put("lockDelayMs", o.lockDelay().toMillis());
        }
        if (o.maxHold() != null) {
            body.put("maxHoldMs", o.maxHold().toMillis());
        }
        return body;
    }

    /** The {@code lease} member, checked against the resource asked for. */
    static LeaseRecord leaseRecord(Reply reply, String purpose, String digest, String op) {
        JsonNode raw = reply.body().get("lease");
        LeaseRecord r;
        try {
            if (raw == null || !raw.isObject()) {
                throw new Off();
            }
            r = new LeaseRecord(reqStr(raw, "purpose"), reqStr(raw, "digest"), reqLong(raw, "fencingToken"),
                    reqLong(raw, "ttlMs"), reqLong(raw, "remainingMs"), reqStr(raw, "guarantee"),
                    reqStr(raw, "acquiredAt"), reqStr(raw, "renewedAt"), optStr(raw, "holder"),
                    optLong(raw, "maxHoldMs"), optStr(raw, "holdEndsAt"));
        } catch (Off e) {
            throw reply.unexpected(op);
        }
        if (!r.purpose().equals(purpose) || !r.digest().equals(digest) || !"fenced".equals(r.guarantee())) {
            throw reply.unexpected(op);
        }
        return r;
    }

    /** A held lease's record and {@code waitedMs}, or a refusal outcome; else throws. */
    record AcquireAnswer(String outcome, LeaseRecord record, Long waitedMs, AcquireOutcome refusal) {}

    static AcquireAnswer acquireAnswer(Reply reply, String purpose, String digest, String op) {
        String outcome = reply.outcome();
        JsonNode b = reply.body();
        try {
            switch (outcome) {
                case "acquired":
                case "replayed_same_operation":
                    return new AcquireAnswer(outcome, leaseRecord(reply, purpose, digest, op), optLong(b, "waitedMs"),
                            null);
                case "owner_operation_conflict":
                    return refusal(new OwnerOperationConflict(reqLong(b, "retryAfterMs")));
                case "contended":
                    return refusal(new Contended(reqLong(b, "retryAfterMs"), optLong(b, "waitedMs"),
                            optStr(b, "reason")));
                case "limit_mismatch":
                    return refusal(new LimitMismatch((int) reqLong(b, "limit")));
                default:
            }
        } catch (Off e) {
            throw reply.unexpected(op);
        }
        throw reply.failure(op);
    }

    private static AcquireAnswer refusal(AcquireOutcome o) {
        return new AcquireAnswer(o.outcome(), null, null, o);
    }

    static RenewOutcome renewAnswer(Reply reply, String purpose, String digest, String op) {
        if ("renewed".equals(reply.outcome())) {
            return new Renewed(leaseRecord(reply, purpose, digest, op));
        }
        if ("lost".equals(reply.outcome())) {
            JsonNode reason = reply.body().get("reason");
            if (reason == null || !reason.isTextual()) {
                throw reply.unexpected(op);
            }
            return new Lost(reason.asText());
        }
        throw reply.failure(op);
    }

    static ReleaseOutcome releaseAnswer(Reply reply, String op) {
        switch (reply.outcome()) {
            case "released":
                return new Released();
            case "already_absent":
                JsonNode reason = reply.body().get("reason");
                return new AlreadyAbsent(reason != null && reason.isTextual() ? reason.asText() : null);
            case "not_owner":
                return new NotOwner();
            default:
                throw reply.failure(op);
        }
    }

    static Inspection inspected(Reply reply, String op) {
        if (!"inspected".equals(reply.outcome())) {
            throw reply.failure(op);
        }
        return inspectionOf(reply.body(), reply, op);
    }

    static Inspection inspectionOf(JsonNode b, Reply reply, String op) {
        try {
            JsonNode held = b.get("held");
            if (held == null || !held.isBoolean()) {
                throw new Off();
            }
            String heldBy = optStr(b, "heldBy");
            if (heldBy != null && !List.of("caller", "caller_other_operation", "other").contains(heldBy)) {
                throw new Off();
            }
            List<Permit> permits = new ArrayList<>();
            JsonNode ps = b.get("permits");
            if (ps != null && !ps.isNull()) {
                if (!ps.isArray()) {
                    throw new Off();
                }
                for (JsonNode p : ps) {
                    permits.add(new Permit(reqLong(p, "fencingToken"), reqLong(p, "remainingMs"), reqLong(p, "ttlMs"),
                            reqStr(p, "acquiredAt"), reqStr(p, "renewedAt"), optStr(p, "holder")));
                }
            }
            Long holders = optLong(b, "holders");
            Long limit = optLong(b, "limit");
            return new Inspection(held.asBoolean(), reqStr(b, "version"), holders == null ? 0 : holders.intValue(),
                    optLong(b, "remainingMs"), optLong(b, "fencingToken"), heldBy, optStr(b, "holder"),
                    optLong(b, "ttlMs"), limit == null ? null : limit.intValue(), optStr(b, "mode"),
                    List.copyOf(permits));
        } catch (Off e) {
            throw reply.unexpected(op);
        }
    }

    static Attempt attemptCreated(Reply reply, String op) {
        if (!"attempt_created".equals(reply.outcome())) {
            throw reply.failure(op);
        }
        JsonNode token = reply.body().get("ownerToken");
        JsonNode id = reply.body().get("operationId");
        if (token == null || !token.isTextual() || id == null || !op.equals(id.asText())) {
            throw reply.unexpected(op);
        }
        try {
            return new Attempt(token.asText(), op);
        } catch (IllegalArgumentException e) {
            throw reply.unexpected(op);
        }
    }
}
