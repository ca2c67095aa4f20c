package io.leasehold.client;

/** Where a lease handle stands (DESIGN §3.6). LOST, RELEASED and UNKNOWN are terminal. */
public enum LeaseState {
    ACTIVE, LOST, RELEASED, UNKNOWN;

    /** Whether no transition leads out of this state. */
    public boolean terminal() {
        return this != ACTIVE;
    }

    /** The lowercase wire/report name ({@code lost}). */
    public String wireName() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }
}
