package io.leasehold.client;

import java.util.List;

/** Plain data the service answers; no I/O. Durations from the wire keep its milliseconds. */
public final class Records {
    private Records() {}

    /** A lease as an acquire, replay or renew answered it. {@code holder}, {@code maxHoldMs} may be null. */
    public record LeaseRecord(String purpose, String digest, long fencingToken, long ttlMs, long remainingMs,
            String guarantee, String acquiredAt, String renewedAt, String holder, Long maxHoldMs, String holdEndsAt) {}

    /** One holder of a resource, as anyone may see it. */
    public record Permit(long fencingToken, long remainingMs, long ttlMs, String acquiredAt, String renewedAt,
            String holder) {}

    /**
     * {@code inspected}: a read-only view, never the holder's owner token. {@code heldBy} only when an
     * attempt was sent; {@code version} changes on acquire, release, expiry and holder change.
     */
    public record Inspection(boolean held, String version, int holders, Long remainingMs, Long fencingToken,
            String heldBy, String holder, Long ttlMs, Integer limit, String mode, List<Permit> permits) {}

    /** One event of {@code GET …/events}: {@code state}, {@code acquired}, {@code released}, {@code expired},
     * {@code holder_changed}, {@code revoked} (or a newer kind); {@code id} is the version. */
    public record WatchEvent(String event, String id, Inspection state) {}

    /** Who leads an election; both null when nobody does. */
    public record Leader(String holder, Long fencingToken) {
        public boolean isHeld() {
            return fencingToken != null;
        }

        static Leader of(Inspection inspection) {
            return inspection.held() ? new Leader(inspection.holder(), inspection.fencingToken()) : new Leader(null, null);
        }
    }

    /** One invalid field of an {@code invalid_request}. */
    public record FieldError(String field, String message) {}
}
