package leasehold

import (
	"context"
	"math/rand"
	"sync"
	"time"
)

// minPause is the shortest pause between two renewals of one lease.
const minPause = 5 * time.Millisecond

// Keeper is a lease's watchdog: a goroutine that renews it at about a third
// of its validity and, when no renew extended it, gives it up (Lost, the loss
// signal fired) StopMargin before its local validity ends. A renew in flight
// is bounded by that instant, so a hung request cannot delay the signal.
type Keeper struct {
	lease  *Lease
	margin time.Duration
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu       sync.Mutex
	renewals int
	lastErr  error
}

// Keep starts a watchdog for l. stopMargin is how long before local validity
// ends the lease is given up when no renew landed: at least one drift (so the
// work has stopped before the store may hand the lease on), at most TTL/2;
// zero means one drift.
func (l *Lease) Keep(stopMargin time.Duration) *Keeper {
	k := &Keeper{lease: l, margin: marginFor(l, stopMargin), stop: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	return k
}

func marginFor(l *Lease, stopMargin time.Duration) time.Duration {
	ttl := l.ttl
	if g := millis(l.record.TTLMs); g > 0 && g < ttl {
		ttl = g
	}
	m := stopMargin
	if m < l.drift {
		m = l.drift
	}
	if m > ttl/2 {
		m = ttl / 2
	}
	return m
}

// Margin is how long before local validity ends the watchdog gives up.
func (k *Keeper) Margin() time.Duration { return k.margin }

// Renewals is how many renews succeeded.
func (k *Keeper) Renewals() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.renewals
}

// LastErr is the last renew's error, if any.
func (k *Keeper) LastErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr
}

// Stop stops renewing (it does not release) and waits for a renew in flight
// to finish (bounded by the give-up instant and the client's timeout).
func (k *Keeper) Stop() {
	k.once.Do(func() { close(k.stop) })
	<-k.done
}

func (k *Keeper) run() {
	defer close(k.done)
	l := k.lease
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var next time.Time
	for {
		if l.State() != Active {
			return
		}
		now := time.Now()
		giveUpAt := l.ValidUntil().Add(-k.margin)
		if !now.Before(giveUpAt) {
			l.giveUp()
			return
		}
		if next.IsZero() {
			// About a third of the validity left, jittered to 80-100 % of that.
			pause := time.Duration(float64(giveUpAt.Sub(now)) / 3 * (0.8 + 0.2*rng.Float64()))
			if pause < minPause {
				pause = minPause
			}
			next = now.Add(pause)
		}
		if now.Before(next) {
			wake := next
			if giveUpAt.Before(wake) {
				wake = giveUpAt
			}
			t := time.NewTimer(wake.Sub(now))
			select {
			case <-k.stop:
				t.Stop()
				return
			case <-l.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		next = time.Time{}
		if !k.renew(giveUpAt) {
			return
		}
	}
}

// renew sends one renew bounded by giveUpAt; false when the watchdog is done.
func (k *Keeper) renew(giveUpAt time.Time) bool {
	l := k.lease
	ctx, cancel := context.WithDeadline(context.Background(), giveUpAt)
	defer cancel()
	type result struct {
		out RenewOutcome
		err error
	}
	answered := make(chan result, 1)
	go func() {
		out, err := l.Renew(ctx, "")
		answered <- result{out, err}
	}()
	timer := time.NewTimer(time.Until(giveUpAt))
	defer timer.Stop()
	select {
	case r := <-answered:
		k.mu.Lock()
		if r.err == nil && r.out.Outcome == OutcomeRenewed {
			k.renewals++
		} else if r.err != nil {
			// The handle's state says what it meant; unavailable and
			// overloaded leave it Active and the next renew comes sooner.
			k.lastErr = r.err
		}
		k.mu.Unlock()
		return true
	case <-timer.C:
		// Give up first (the signal fires now), then abandon the renew.
		l.giveUp()
		cancel()
		<-answered
		return false
	case <-k.stop:
		// Let the renew in flight finish: the handle learns its answer.
		r := <-answered
		k.mu.Lock()
		if r.err != nil {
			k.lastErr = r.err
		}
		k.mu.Unlock()
		return false
	}
}
