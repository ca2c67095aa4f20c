package io.leasehold.client.fencing;

import io.leasehold.client.LeaseholdException;

/**
 * A newer holder has written to {@code resource}: {@code token} is older than {@code current}. Roll the
 * transaction back and stop the work; this holder's lease is gone (DESIGN §16).
 */
public class StaleFencingTokenException extends LeaseholdException {
    private static final long serialVersionUID = 1L;
    private final String resource;
    private final long token;
    private final Long current;

    public StaleFencingTokenException(String resource, long token, Long current) {
        super("stale fencing token " + token + " for '" + resource + "': a newer holder wrote with " + current);
        this.resource = resource;
        this.token = token;
        this.current = current;
    }

    public String resource() {
        return resource;
    }

    public long token() {
        return token;
    }

    /** The highest token recorded, or null if the row vanished meanwhile. */
    public Long current() {
        return current;
    }
}
