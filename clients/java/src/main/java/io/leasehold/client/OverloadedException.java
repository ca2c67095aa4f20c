package io.leasehold.client;

/** Shed by the service's admission limit before touching the store; nothing was applied. */
public class OverloadedException extends LeaseholdException {
    private static final long serialVersionUID = 1L;
    private final Long retryAfterMs;

    public OverloadedException(Long retryAfterMs) {
        super("overloaded, nothing was applied");
        this.retryAfterMs = retryAfterMs;
    }

    /** The service's retry hint in milliseconds, or null. */
    public Long retryAfterMs() {
        return retryAfterMs;
    }
}
