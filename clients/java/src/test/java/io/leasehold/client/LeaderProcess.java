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
        // A cold JVM spends its first few hundred milliseconds loading classes; counted from the
        // send, that would eat a 1 s lease's validity. Warm the paths a term uses first.
        for (int i = 0; i < 3; i++) {
            client.inspect(args[1], args[2], null);
            client.inspectAsync(args[1], args[2], null).join();
        }
        Election e = new Election(client, args[1], args[2], args[4],
                Election.Options.ttl(Duration.ofMillis(Long.parseLong(args[3]))), new Election.Listener() {
                    @Override
                    public void startedLeading(Election.Term term) {
                        System.out.println("leading " + term.fencingToken());
                        System.out.flush();
                    }

                    @Override
                    public void stoppedLeading(Election.Term term, Election.StopReason reason) {
                        System.out.println("stopped " + term.fencingToken() + " " + reason);
                        System.out.flush();
                    }
                });
        e.campaign();
    }
}
