package io.leasehold.client;

/**
 * Definitely not applied: the store was unreachable, or no connection to the service could be
 * made ({@code cause}: {@code service}, {@code connect}, {@code tls}). Retry later.
 */
public class UnavailableException extends LeaseholdException {
    private static final long serialVersionUID = 1L;
    private final String why;
    private final Long retryAfterMs;

    public UnavailableException(String why, Long retryAfterMs, Throwable cause) {
        super("unavailable, nothing was applied (" + why + ")", cause);
        this.why = why;
        this.retryAfterMs = retryAfterMs;
    }

    /** {@code service}, {@code connect} or {@code tls}. */
    public String why() {
        return why;
    }

    /** The service's retry hint in milliseconds, or null. */
    public Long retryAfterMs() {
        return retryAfterMs;
    }
}
