package io.leasehold.client;

/**
 * Sent, and no certain reply: it may or may not have been applied. Inspect, or retry with the
 * <em>same</em> attempt ({@code why}: {@code service}, {@code timeout}, {@code connection_lost},
 * {@code unexpected_reply}).
 */
public class IndeterminateException extends LeaseholdException {
    private static final long serialVersionUID = 1L;
    private final String operationId;
    private final String why;
    private final int status;

    public IndeterminateException(String operationId, String why, int status, Throwable cause) {
        super("indeterminate: sent with no certain reply (" + why + ")", cause);
        this.operationId = operationId;
        this.why = why;
        this.status = status;
    }

    public String operationId() {
        return operationId;
    }

    public String why() {
        return why;
    }

    /** The HTTP status when a reply came (0 when none did). */
    public int status() {
        return status;
    }

    @Override
    public boolean mayHaveApplied() {
        return true;
    }
}
