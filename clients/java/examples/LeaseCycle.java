import io.leasehold.client.AcquireOptions;
import io.leasehold.client.Attempt;
import io.leasehold.client.LeaseholdClient;
import io.leasehold.client.LockHandle;
import io.leasehold.client.LockOptions;
import io.leasehold.client.Names;
import io.leasehold.client.Outcomes.AcquireOutcome;
import io.leasehold.client.Outcomes.Acquired;
import io.leasehold.client.Outcomes.Replayed;
import io.leasehold.client.Records.Inspection;
import java.time.Duration;

/** A lease cycle, a replay, a refusal, and a lock whose keeper renews. */
public final class LeaseCycle {
    private LeaseCycle() {}

    public static void main(String[] args) throws Exception {
        String url = System.getenv().getOrDefault("LEASEHOLD_URL", "http://127.0.0.1:8080");
        LeaseholdClient client = LeaseholdClient.builder(url).build();
        String digest = Names.digest("order-42"); // the service never sees the raw id

        Attempt attempt = Attempt.generate("export-2026-12-05"); // made before the first acquire
        System.out.println(attempt);
        AcquireOptions ask = AcquireOptions.ttl(Duration.ofSeconds(30)).withHolder("worker-7");
        AcquireOutcome outcome = client.acquire("invoice-export", digest, attempt, ask);
        if (!(outcome instanceof Acquired acquired)) {
            throw new IllegalStateException("not acquired: " + outcome);
        }
        var lease = acquired.lease();
        System.out.println(acquired.outcome() + " " + lease.fencingToken() + " valid for " + lease.validFor().toMillis()
                + " ms (drift " + lease.drift().toMillis() + " ms)");

        // The same attempt again (say, after a lost reply): a replay, not a second lease.
        Replayed again = (Replayed) client.acquire("invoice-export", digest, attempt, ask);
        System.out.println(again.outcome() + " " + again.record().fencingToken());

        // Anyone else is told how long to wait.
        System.out.println(client.acquire("invoice-export", digest, Attempt.generate("other-worker"),
                AcquireOptions.ttl(Duration.ofSeconds(5))));

        System.out.println(lease.renew().outcome());
        Inspection seen = client.inspect("invoice-export", digest, null);
        System.out.println("held=" + seen.held() + " holder=" + seen.holder() + " token=" + seen.fencingToken());
        System.out.println(lease.release() + " " + lease.state());
        try {
            lease.renew();
        } catch (io.leasehold.client.RefusedException e) {
            System.out.println(e.getMessage());
        }

        // lock(): one attempt, retried while uncertain; a keeper renews at about a third of the
        // validity; on loss this thread is interrupted. close() releases.
        try (LockHandle lock = client.lock("invoice-export", digest, LockOptions.ttl(Duration.ofMillis(600)))) {
            long before = lock.lease().validUntilNanos();
            Thread.sleep(900); // longer than the TTL: the keeper renews meanwhile
            System.out.println("lock " + lock.outcome() + ", still valid after 900 ms: " + lock.lease().isValid()
                    + ", validity moved " + (lock.lease().validUntilNanos() - before) / 1_000_000 + " ms");
        }
        System.out.println("after close: held=" + client.inspect("invoice-export", digest, null).held());
    }
}
