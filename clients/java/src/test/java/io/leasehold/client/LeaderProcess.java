package io.leasehold.client;

import java.time.Duration;

/**
 * A candidate in a process of its own (the conformance table's {@code kill_leader_process}): campaigns,
 * prints {@code leading <fencing token>} once it leads, and runs until killed.
 * Usage: {@code LeaderProcess URL PURPOSE DIGEST TTL_MS HOLDER}.
 */
public final class LeaderProcess {
    private LeaderProcess() {}

    public static void main(String[] args) {
        LeaseholdClient client = LeaseholdClient.builder(args[0]).build();
        Election e = new Election(client, args[1], args[2], args[4],
                Election.Options.ttl(Duration.ofMillis(Long.parseLong(args[3]))), new Election.Listener() {
                    @Override
                    public void startedLeading(Election.Term term) {
                        System.out.println("leading " + term.fencingToken());
                        System.out.flush();
                    }
                });
        e.campaign();
    }
}
