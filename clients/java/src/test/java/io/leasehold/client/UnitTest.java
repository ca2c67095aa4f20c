package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.leasehold.client.HandleCore.ReleaseReply;
import io.leasehold.client.HandleCore.RenewReply;
import io.leasehold.client.Outcomes.Contended;
import io.leasehold.client.Outcomes.Lost;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/** No I/O: the names, the state machine, the SSE parser and the reply decoding. */
class UnitTest {
    static final long MS = 1_000_000L;

    @Test
    void digestIsSha256HexWithItsVersion() {
        // The same value the Python and TypeScript clients' tests pin.
        assertEquals("v1.3bf8b157c4238eefe5ae4a66eca81c6b887d4dcedb58dd674271859f4dc2edfd", Names.digest("order-42"));
        assertThrows(IllegalArgumentException.class, () -> Names.checkPurpose("Bad"));
        assertThrows(IllegalArgumentException.class, () -> Names.checkDigest("v1.abc"));
        assertThrows(IllegalArgumentException.class, () -> Names.checkHolder("a\nb"));
    }

    @Test
    void anAttemptIsMadeLocallyAndItsTokenNeverPrinted() {
        Attempt a = Attempt.generate("op-1");
        assertTrue(a.ownerToken().matches("^[A-Za-z0-9_-]{32}$"), a.ownerToken());
        assertFalse(a.toString().contains(a.ownerToken()));
        assertTrue(a.toString().contains("op-1"));
        assertThrows(IllegalArgumentException.class, () -> Attempt.generate("bad id"));
        assertFalse(Attempt.generate("op-1").ownerToken().equals(a.ownerToken()));
    }

    @Test
    void validityCountsFromTheSendLessTheDrift() {
        HandleCore c = new HandleCore(1000 * MS, 3000 * MS, 2500 * MS, 30 * MS);
        assertEquals((1000 + 2500 - 30) * MS, c.validUntil);
        assertEquals(LeaseState.ACTIVE, c.observe((1000 + 2469) * MS));
        assertEquals(LeaseState.LOST, c.observe((1000 + 2470) * MS));
        assertTrue(c.expiredLocally);
    }

    @Test
    void aLateRenewedNeverRevivesAnExpiredHandle() {
        HandleCore c = new HandleCore(0, 100 * MS, 100 * MS, 10 * MS);
        assertEquals(LeaseState.ACTIVE, c.beginRenew(50 * MS));
        assertEquals(LeaseState.LOST, c.finishRenew(200 * MS, 50 * MS, RenewReply.RENEWED, 100 * MS, false));
    }

    @Test
    void renewedExtendsFromItsOwnSend() {
        HandleCore c = new HandleCore(0, 100 * MS, 100 * MS, 10 * MS);
        c.finishRenew(40 * MS, 30 * MS, RenewReply.RENEWED, 100 * MS, false);
        assertEquals(120 * MS, c.validUntil);
    }

    @Test
    void terminalStatesAreFinal() {
        for (RenewReply r : new RenewReply[] {RenewReply.LOST, RenewReply.INDETERMINATE}) {
            HandleCore c = new HandleCore(0, 1000 * MS, 1000 * MS, 10 * MS);
            LeaseState s = c.finishRenew(1, 0, r, 0, false);
            assertTrue(s.terminal());
            assertEquals(s, c.finishRenew(2, 1, RenewReply.RENEWED, 1000 * MS, false), "renewed after " + s);
            assertEquals(s, c.finishRelease(3, ReleaseReply.RELEASED), "released after " + s);
            assertEquals(s, c.beginRenew(4));
        }
        HandleCore c = new HandleCore(0, 1000 * MS, 1000 * MS, 10 * MS);
        assertEquals(LeaseState.ACTIVE, c.finishRenew(1, 0, RenewReply.NOT_APPLIED, 0, false));
        assertEquals(LeaseState.RELEASED, c.finishRelease(2, ReleaseReply.RELEASED));
        assertFalse(c.beginRelease(3), "a RELEASED handle sends no second release");
        HandleCore d = new HandleCore(0, 1000 * MS, 1000 * MS, 10 * MS);
        assertEquals(LeaseState.LOST, d.finishRelease(1, ReleaseReply.NOT_OWNER));
        assertTrue(d.beginRelease(2), "a LOST handle may still send a clean-up release");
    }

    @Test
    void aBoundedHoldCapsValidity() {
        HandleCore c = new HandleCore(0, 1000 * MS, 1000 * MS, 10 * MS);
        c.limitHold(500 * MS);
        assertEquals(500 * MS, c.validUntil);
        assertTrue(c.atHoldEnd());
        c.finishRenew(100 * MS, 100 * MS, RenewReply.RENEWED, 1000 * MS, false);
        assertEquals(500 * MS, c.validUntil);
    }

    @Test
    void sseParserFollowsTheWhatwgRules() {
        SseParser p = new SseParser(null);
        assertNull(p.feed(": keepalive"));
        assertNull(p.feed("event: acquired"));
        assertNull(p.feed("id: v7"));
        assertNull(p.feed("data: {\"a\":"));
        assertNull(p.feed("data:1}"));
        assertNull(p.feed("retry: 10"));
        SseParser.RawEvent e = p.feed("");
        assertEquals("acquired", e.event());
        assertEquals("v7", e.id());
        assertEquals("{\"a\":\n1}", e.data());
        assertNull(p.feed(""), "a blank line without data dispatches nothing");
        p.feed("data: x");
        SseParser.RawEvent m = p.feed("");
        assertEquals("message", m.event());
        assertEquals("v7", m.id(), "the last id carries over");
    }

    @Test
    void eventStreamLinesEndAtCrLfOrCrlfAndAreBounded() throws Exception {
        var in = new java.io.BufferedInputStream(new java.io.ByteArrayInputStream(
                "a\r\nb\rc\n\nd".getBytes(StandardCharsets.UTF_8)));
        assertEquals("a", Watch.readLine(in));
        assertEquals("b", Watch.readLine(in));
        assertEquals("c", Watch.readLine(in));
        assertEquals("", Watch.readLine(in));
        assertEquals("d", Watch.readLine(in));
        assertNull(Watch.readLine(in));
        byte[] huge = new byte[SseParser.MAX_EVENT_CHARS + 1];
        java.util.Arrays.fill(huge, (byte) 'x');
        assertThrows(java.io.IOException.class,
                () -> Watch.readLine(new java.io.BufferedInputStream(new java.io.ByteArrayInputStream(huge))));
    }

    static Wire.Reply reply(int status, String json) {
        return Wire.Reply.of(status, json.getBytes(StandardCharsets.UTF_8));
    }

    static final String D = Names.digest("x");

    @Test
    void contendedCarriesItsRetryHint() {
        Wire.AcquireAnswer a = Wire.acquireAnswer(reply(409, "{\"outcome\":\"contended\",\"retryAfterMs\":1234}"), "p", D,
                "op");
        Contended c = assertInstanceOf(Contended.class, a.refusal());
        assertEquals(1234, c.retryAfterMs());
    }

    @Test
    void lostCarriesItsReasonAndWithoutOneIsOffTheContract() {
        Lost l = assertInstanceOf(Lost.class,
                Wire.renewAnswer(reply(404, "{\"outcome\":\"lost\",\"reason\":\"absent\"}"), "p", D, "op"));
        assertEquals("absent", l.reason());
        assertThrows(IndeterminateException.class, () -> Wire.renewAnswer(reply(404, "{\"outcome\":\"lost\"}"), "p", D, "op"));
    }

    @Test
    void failuresAreClassified() {
        LeaseholdException u = reply(503, "{\"outcome\":\"unavailable\",\"retryAfterMs\":200}").failure("op");
        assertEquals(200L, assertInstanceOf(UnavailableException.class, u).retryAfterMs());
        assertFalse(u.mayHaveApplied());
        assertInstanceOf(OverloadedException.class, reply(503, "{\"outcome\":\"overloaded\"}").failure("op"));
        LeaseholdException i = reply(504, "{\"outcome\":\"indeterminate\"}").failure("op-9");
        assertEquals("op-9", assertInstanceOf(IndeterminateException.class, i).operationId());
        assertTrue(i.mayHaveApplied());
        assertInstanceOf(IndeterminateException.class, reply(500, "oops").failure("op"), "an answer off the contract");
        InvalidRequestException bad = assertInstanceOf(InvalidRequestException.class, reply(422,
                "{\"outcome\":\"invalid_request\",\"detail\":\"d\",\"errors\":[{\"field\":\"ttlMs\",\"message\":\"m\"}]}")
                .failure("op"));
        assertEquals("ttlMs", bad.errors().get(0).field());
        assertInstanceOf(RejectedException.class, reply(401, "{\"outcome\":\"unauthorized\"}").failure("op"));
    }

    @Test
    void aLeaseForAnotherResourceIsOffTheContract() {
        String body = "{\"outcome\":\"acquired\",\"lease\":{\"purpose\":\"p\",\"digest\":\"" + Names.digest("y")
                + "\",\"fencingToken\":1,\"ttlMs\":1000,\"remainingMs\":1000,\"guarantee\":\"fenced\","
                + "\"acquiredAt\":\"t\",\"renewedAt\":\"t\"}}";
        assertThrows(IndeterminateException.class, () -> Wire.acquireAnswer(reply(201, body), "p", D, "op"));
    }

    @Test
    void driftIsTheLargerOfTheBudgetAndOnePercent() {
        LeaseholdClient c = LeaseholdClient.builder("http://127.0.0.1:1").build();
        assertEquals(Duration.ofMillis(300), c.driftFor(Duration.ofSeconds(30)));
        assertEquals(Duration.ofMillis(10), c.driftFor(Duration.ofMillis(300)));
        assertThrows(IllegalArgumentException.class, () -> LeaseholdClient.builder("ftp://x"));
    }
}
