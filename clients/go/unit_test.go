package leasehold

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestDigestOfARawID(t *testing.T) {
	got := Digest("order-42")
	if got != "v1.3bf8b157c4238eefe5ae4a66eca81c6b887d4dcedb58dd674271859f4dc2edfd" {
		t.Fatalf("digest %s", got)
	}
	if _, err := NewResource("Bad_Purpose", "x"); err == nil {
		t.Fatal("a purpose off the pattern was accepted")
	}
}

func TestAttemptNeverPrintsItsToken(t *testing.T) {
	a, err := NewAttempt("op-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.OwnerToken()) != 32 || !ownerTokenPattern.MatchString(a.OwnerToken()) {
		t.Fatalf("owner token %d characters", len(a.OwnerToken()))
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(format, a); strings.Contains(s, a.OwnerToken()) {
			t.Fatalf("%s printed the token: %s", format, s)
		}
	}
	b, _ := NewAttempt("op-1")
	if a.OwnerToken() == b.OwnerToken() {
		t.Fatal("two attempts share a token")
	}
	if _, err := NewAttempt("bad op"); err == nil {
		t.Fatal("an operation id with a space was accepted")
	}
}

func TestDriftIsTheLargerOfBudgetAndFraction(t *testing.T) {
	c, err := New("http://127.0.0.1:1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.DriftFor(30 * time.Second); d != 300*time.Millisecond {
		t.Fatalf("30 s: %v", d)
	}
	if d := c.DriftFor(300 * time.Millisecond); d != 10*time.Millisecond {
		t.Fatalf("300 ms: %v", d)
	}
	sent := time.Unix(1000, 0)
	// min(TTL, remainingMs) − drift from the send; never before the send.
	if end := validityEnd(sent, 30*time.Second, 29*time.Second, 300*time.Millisecond); end != sent.Add(28700*time.Millisecond) {
		t.Fatalf("validity end %v", end.Sub(sent))
	}
	if end := validityEnd(sent, time.Second, 5*time.Millisecond, 10*time.Millisecond); end != sent {
		t.Fatalf("validity end %v", end.Sub(sent))
	}
}

func testLease(t *testing.T, ttl, remaining time.Duration) *Lease {
	c, err := New("http://127.0.0.1:1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := NewAttempt("op")
	res, _ := NewResource("unit", "r")
	rec := LeaseRecord{Purpose: res.Purpose, Digest: res.Digest, FencingToken: 7, TTLMs: ms(ttl), RemainingMs: ms(remaining), Guarantee: "fenced"}
	return newLease(c, res, a, rec, time.Now(), ttl)
}

func TestLocalExpiryMakesTheHandleLostAndSignals(t *testing.T) {
	l := testLease(t, 100*time.Millisecond, 100*time.Millisecond)
	called := make(chan State, 1)
	l.OnLost(func(x *Lease) { called <- x.State() })
	if l.State() != Active {
		t.Fatalf("state %v", l.State())
	}
	select {
	case <-l.Lost():
	case <-time.After(time.Second):
		t.Fatal("no loss signal at local expiry")
	}
	if !time.Now().After(l.ValidUntil()) && !time.Now().Equal(l.ValidUntil()) {
		t.Fatal("signalled before validity ended")
	}
	if s := <-called; s != Lost {
		t.Fatalf("callback saw %v", s)
	}
	if !l.ExpiredLocally() || l.ValidFor() != 0 {
		t.Fatal("expiry not recorded")
	}
	// Terminal: a renew is refused locally, before anything is sent (the
	// client points at a port nobody listens on: a send would be unavailable).
	if _, err := l.Renew(context.Background(), ""); !errors.Is(err, ErrRefused) {
		t.Fatalf("renew on a lost handle: %v", err)
	}
	var lost *LeaseLostError
	if err := l.Check(); !errors.As(err, &lost) || lost.FencingToken != 7 || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("check: %v", err)
	}
}

func TestAWatchdogThatCannotRenewGivesUpOneMarginEarly(t *testing.T) {
	// Nobody listens on port 1: every renew is unavailable (not applied), the
	// handle stays Active, and the watchdog gives it up before validity ends.
	l := testLease(t, 300*time.Millisecond, 300*time.Millisecond)
	k := l.Keep(0)
	defer k.Stop()
	if k.Margin() != l.Drift() || l.Drift() != 10*time.Millisecond {
		t.Fatalf("margin %v drift %v", k.Margin(), l.Drift())
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("no loss signal")
	}
	if at := time.Now(); !at.Before(l.ValidUntil()) {
		t.Fatalf("gave up %v after validity ended", at.Sub(l.ValidUntil()))
	}
	if !errors.Is(k.LastErr(), ErrUnavailable) {
		t.Fatalf("last renew error %v", k.LastErr())
	}
	if l.State() != Lost || !l.ExpiredLocally() {
		t.Fatalf("state %v", l.State())
	}
}

func TestTransportFailuresAreClassified(t *testing.T) {
	ctx := context.Background()
	a, _ := NewAttempt("op-net")
	res, _ := NewResource("unit", "r")

	// Refused: nothing was sent.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, _ := New("http://"+addr, Options{})
	_, err = c.Acquire(ctx, res, a, AcquireOptions{TTL: time.Second})
	var le *Error
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &le) || le.Cause != "connect" {
		t.Fatalf("refused: %v", err)
	}

	// Read the whole request, then close: it was sent, the answer lost.
	cut := serveOnce(t, func(conn net.Conn) {
		readRequest(conn)
		conn.Close()
	})
	c, _ = New(cut, Options{})
	_, err = c.Acquire(ctx, res, a, AcquireOptions{TTL: time.Second})
	if !errors.Is(err, ErrIndeterminate) || !errors.As(err, &le) || le.OperationID != "op-net" {
		t.Fatalf("cut after the request: %v", err)
	}

	// Read the request and never answer: a timeout after the send.
	silent := serveOnce(t, func(conn net.Conn) {
		readRequest(conn)
		time.Sleep(time.Second)
		conn.Close()
	})
	c, _ = New(silent, Options{Timeout: 100 * time.Millisecond})
	_, err = c.Renew(ctx, res, a, time.Second, "")
	if !errors.Is(err, ErrIndeterminate) || !errors.As(err, &le) || le.Cause != "timeout" {
		t.Fatalf("silent: %v", err)
	}

	// An answer off the contract is as uncertain as none.
	garbled := serveOnce(t, func(conn net.Conn) {
		readRequest(conn)
		_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 21\r\n\r\n{\"outcome\":\"renewed\"}"))
		conn.Close()
	})
	c, _ = New(garbled, Options{})
	_, err = c.Renew(ctx, res, a, time.Second, "")
	if !errors.Is(err, ErrIndeterminate) || !errors.As(err, &le) || le.Cause != "unexpected_reply" {
		t.Fatalf("garbled: %v", err)
	}
}

// serveOnce accepts one connection on a loopback port and hands it to fn.
func serveOnce(t *testing.T, fn func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		fn(conn)
	}()
	return "http://" + ln.Addr().String()
}

// readRequest reads a request head and its Content-Length body.
func readRequest(conn net.Conn) {
	buf := make([]byte, 0, 4096)
	chunk := make([]byte, 4096)
	for {
		n, err := conn.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil {
			return
		}
		head, body, found := strings.Cut(string(buf), "\r\n\r\n")
		if !found {
			continue
		}
		length := 0
		for _, line := range strings.Split(head, "\r\n") {
			if name, value, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "content-length") {
				fmt.Sscan(strings.TrimSpace(value), &length)
			}
		}
		if len(body) >= length {
			return
		}
	}
}

func TestSSEParser(t *testing.T) {
	var p sseParser
	var got []rawEvent
	for _, line := range []string{": keep-alive", "event: state", "id: 1.0", "data: {\"a\":1}", "", "", "data: x", "data: y", "retry: 5", ""} {
		if ev, ok := p.feed(line); ok {
			got = append(got, ev)
		}
	}
	if len(got) != 2 {
		t.Fatalf("events %v", got)
	}
	if got[0] != (rawEvent{event: "state", data: `{"a":1}`, id: "1.0"}) {
		t.Fatalf("first %+v", got[0])
	}
	if got[1] != (rawEvent{event: "message", data: "x\ny", id: "1.0"}) {
		t.Fatalf("second %+v", got[1])
	}
}

func TestFenceSQLRefusesTableNamesThatAreNotPlain(t *testing.T) {
	s, err := FenceSQL("app.fences")
	if err != nil || !strings.Contains(s, "WHERE fences.token <= EXCLUDED.token") {
		t.Fatalf("%v %s", err, s)
	}
	if _, err := FenceSQL("x; DROP TABLE y"); err == nil {
		t.Fatal("accepted an injection")
	}
}

// A stream line longer than an event may be (10 MiB of data, never ended)
// ends the watch as an unexpected reply after about maxEventBytes: the
// client neither buffers the whole line nor waits for its end.
func TestAnOverlongStreamLineEndsTheWatchBounded(t *testing.T) {
	const sent = 10 << 20
	written := make(chan int, 1)
	url := serveOnce(t, func(conn net.Conn) {
		defer conn.Close()
		readRequest(conn)
		total := 0
		defer func() { written <- total }()
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: "
		if _, err := conn.Write([]byte(head)); err != nil {
			return
		}
		chunk := []byte(strings.Repeat("x", 64<<10))
		for total < sent {
			n, err := conn.Write(chunk)
			total += n
			if err != nil {
				return
			}
		}
		// The whole line was sent (the client kept reading): end the
		// stream so an unbounded reader fails the test now, not at its
		// idle timeout.
	})
	c, err := New(url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := NewResource("unit", "r")
	w, err := c.Watch(context.Background(), res, WatchOptions{NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = w.Next()
	var le *Error
	if !errors.Is(err, ErrIndeterminate) || !errors.As(err, &le) || le.Cause != "unexpected_reply" {
		t.Fatalf("an overlong line: %v", err)
	}
	// The client left: the server's writes fail soon after the bound (the
	// sockets' buffers hold a few MiB at most).
	if total := <-written; total >= sent {
		t.Fatalf("the client read the whole %d-byte line before refusing it", total)
	}
}
