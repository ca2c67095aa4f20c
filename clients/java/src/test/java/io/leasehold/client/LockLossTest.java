package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.util.UUID;
import org.junit.jupiter.api.Test;

/** withLock when the lease is taken away behind the holder (its Redis key deleted). */
class LockLossTest {
    @Test
    void withLockInterruptsTheWorkAndSaysTheLeaseWasLost() {
        try (Harness.Redis redis = new Harness.Redis(); Harness.Service service = new Harness.Service(redis)) {
            LeaseholdClient client = LeaseholdClient.builder(service.url).build();
            String digest = Names.digest("res-" + UUID.randomUUID());
            LeaseLostException e = assertThrows(LeaseLostException.class,
                    () -> client.withLock("java-loss", digest, LockOptions.ttl(Duration.ofSeconds(3)), () -> {
                        redis.cli("DEL", service.leaseKey("java-loss", digest));
                        Thread.sleep(10_000); // the work, until the loss interrupts it
                        return "finished";
                    }));
            assertEquals(LeaseState.LOST, e.state(), e.getMessage());
            assertEquals("absent", e.reason(), e.getMessage() + " cause " + e.getCause());
            assertInstanceOf(InterruptedException.class, e.getCause(), "the work was interrupted");
            assertFalse(Thread.currentThread().isInterrupted(), "the lock's own interrupt does not leak out");
        }
    }
}
