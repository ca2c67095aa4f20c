package leasehold

import (
	"context"
	"errors"
	"log"
	"strconv"
	"sync"
	"time"
)

// Lease is one held lease: its fencing token, its local validity counted from
// the send of the acquire or renew, and the closed state machine of DESIGN
// §3.6: Active → Lost | Released | Unknown, all terminal. A renew on a
// terminal handle is refused locally; local expiry moves Active to Lost.
// Safe for concurrent use.
type Lease struct {
	client  *Client
	res     Resource
	attempt Attempt
	record  LeaseRecord
	ttl     time.Duration
	drift   time.Duration

	mu             sync.Mutex
	state          State
	validUntil     time.Time
	expiredLocally bool
	lostReason     string
	lost           chan struct{} // closed once on Lost or Unknown
	ended          chan struct{} // closed once on any terminal state
	callbacks      []func(*Lease)
	timer          *time.Timer
}

// validityEnd is send + min(ttl, remaining) − drift, never before send.
func validityEnd(sent time.Time, ttl, remaining, drift time.Duration) time.Time {
	d := ttl
	if remaining < d {
		d = remaining
	}
	d -= drift
	if d < 0 {
		d = 0
	}
	return sent.Add(d)
}

func newLease(c *Client, res Resource, a Attempt, rec LeaseRecord, sent time.Time, ttl time.Duration) *Lease {
	// Proportional to the TTL the store granted (a replay reports the replayed
	// acquisition's, which may be shorter than asked), as the Rust client.
	granted := millis(rec.TTLMs)
	base := ttl
	if granted > 0 && granted < base {
		base = granted
	}
	l := &Lease{
		client:  c,
		res:     res,
		attempt: a,
		record:  rec,
		ttl:     ttl,
		drift:   c.DriftFor(base),
		lost:    make(chan struct{}),
		ended:   make(chan struct{}),
	}
	l.validUntil = validityEnd(sent, ttl, millis(rec.RemainingMs), l.drift)
	l.mu.Lock()
	l.armLocked()
	l.mu.Unlock()
	return l
}

// FencingToken: present it with every effect; the resource rejects tokens
// lower than one it has seen.
func (l *Lease) FencingToken() int64 { return l.record.FencingToken }

// Record is the lease as the acquire answered it.
func (l *Lease) Record() LeaseRecord { return l.record }

// Resource is what the lease is on.
func (l *Lease) Resource() Resource { return l.res }

// Attempt is the attempt that holds it.
func (l *Lease) Attempt() Attempt { return l.attempt }

// TTL is the TTL asked for on acquire and on every renew.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Drift is the drift budget taken off this lease's validity.
func (l *Lease) Drift() time.Duration { return l.drift }

// State is the state now (an Active handle past its validity becomes Lost).
func (l *Lease) State() State {
	l.mu.Lock()
	fire := l.observeLocked(time.Now())
	s := l.state
	l.mu.Unlock()
	fire()
	return s
}

// Valid says whether the lease is Active and locally valid now.
func (l *Lease) Valid() bool { return l.State() == Active }

// ValidUntil is the end of local validity as last extended.
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// ValidFor is the local validity left now; zero unless Active.
func (l *Lease) ValidFor() time.Duration {
	now := time.Now()
	l.mu.Lock()
	fire := l.observeLocked(now)
	left := time.Duration(0)
	if l.state == Active {
		left = l.validUntil.Sub(now)
	}
	l.mu.Unlock()
	fire()
	return left
}

// LostReason is the service's reason when a renew answered lost (absent,
// not_owner, revoked, max_hold), else empty.
func (l *Lease) LostReason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostReason
}

// ExpiredLocally says whether it became Lost because local validity ran out
// (or a watchdog gave it up just before), not by the service's word.
func (l *Lease) ExpiredLocally() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiredLocally
}

// Lost is closed once, when the lease becomes Lost or Unknown (never on a release).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Done is closed once, when the handle reaches any terminal state.
func (l *Lease) Done() <-chan struct{} { return l.ended }

// Check returns a *LeaseLostError unless the lease is Active and locally valid now.
func (l *Lease) Check() error {
	if s := l.State(); s != Active {
		return l.lostError(s)
	}
	return nil
}

func (l *Lease) lostError(s State) *LeaseLostError {
	if s == Released {
		s = Lost
	}
	return &LeaseLostError{State: s, FencingToken: l.record.FencingToken, Reason: l.LostReason()}
}

// OnLost calls fn(lease) once, in its own goroutine, when the lease becomes
// Lost or Unknown (at once if it already is). A release never calls it.
func (l *Lease) OnLost(fn func(*Lease)) {
	l.mu.Lock()
	s := l.state
	if s == Active {
		l.callbacks = append(l.callbacks, fn)
	}
	l.mu.Unlock()
	if s == Lost || s == Unknown {
		go l.callBack(fn)
	}
}

func (l *Lease) callBack(fn func(*Lease)) {
	defer func() {
		if p := recover(); p != nil {
			log.Printf("leasehold: a lease-lost callback panicked: %v", p)
		}
	}()
	fn(l)
}

// armLocked (re)sets the local-expiry timer so that Lost fires even when
// nobody looks at the handle.
func (l *Lease) armLocked() {
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.state != Active {
		return
	}
	l.timer = time.AfterFunc(time.Until(l.validUntil), func() { l.State() })
}

// moveLocked makes a terminal move and returns what to signal, to be called
// after the lock is released.
func (l *Lease) moveLocked(s State) func() {
	if l.state != Active || s == Active {
		return func() {}
	}
	l.state = s
	if l.timer != nil {
		l.timer.Stop()
	}
	close(l.ended)
	if s == Released {
		return func() {}
	}
	close(l.lost)
	callbacks := l.callbacks
	l.callbacks = nil
	return func() {
		for _, fn := range callbacks {
			go l.callBack(fn)
		}
	}
}

func (l *Lease) observeLocked(now time.Time) func() {
	if l.state == Active && !now.Before(l.validUntil) {
		l.expiredLocally = true
		return l.moveLocked(Lost)
	}
	return func() {}
}

// giveUp stops treating the lease as ours before its validity ends (a
// watchdog whose renewals did not land in time): Active → Lost, as a local expiry.
func (l *Lease) giveUp() {
	l.mu.Lock()
	fire := func() {}
	if l.state == Active {
		l.expiredLocally = true
		fire = l.moveLocked(Lost)
	}
	l.mu.Unlock()
	fire()
}

// Renew renews with the handle's TTL (and a new public holder label when
// given). Refused locally (ErrRefused) on a terminal handle; renewed restarts
// local validity from this call's send; lost → Lost; indeterminate → Unknown;
// unavailable or overloaded leave it Active.
func (l *Lease) Renew(ctx context.Context, holder string) (RenewOutcome, error) {
	if s := l.State(); s != Active {
		return RenewOutcome{}, ErrRefused
	}
	sent := time.Now()
	out, err := l.client.Renew(ctx, l.res, l.attempt, l.ttl, holder)
	l.mu.Lock()
	fire := l.observeLocked(time.Now())
	if l.state == Active {
		switch {
		case err == nil && out.Outcome == OutcomeRenewed:
			end := validityEnd(sent, l.ttl, millis(out.Record.RemainingMs), l.drift)
			if end.After(l.validUntil) {
				l.validUntil = end
				l.armLocked()
			}
		case err == nil && out.Outcome == OutcomeLost:
			l.lostReason = out.Reason
			fire = l.moveLocked(Lost)
		case errors.Is(err, ErrIndeterminate):
			fire = l.moveLocked(Unknown)
		}
	}
	l.mu.Unlock()
	fire()
	return out, err
}

// Release releases. released/already_absent → Released, not_owner → Lost,
// indeterminate → Unknown. A Lost or Unknown handle still sends it (clean-up);
// a Released one answers already_absent without sending.
func (l *Lease) Release(ctx context.Context) (ReleaseOutcome, error) {
	l.mu.Lock()
	released := l.state == Released
	l.mu.Unlock()
	if released {
		return ReleaseOutcome{Outcome: OutcomeAlreadyAbsent}, nil
	}
	out, err := l.client.Release(ctx, l.res, l.attempt)
	l.mu.Lock()
	fire := l.observeLocked(time.Now())
	if l.state == Active {
		switch {
		case err == nil && out.Outcome == OutcomeNotOwner:
			fire = l.moveLocked(Lost)
		case err == nil:
			fire = l.moveLocked(Released)
		case errors.Is(err, ErrIndeterminate):
			fire = l.moveLocked(Unknown)
		}
	}
	l.mu.Unlock()
	fire()
	return out, err
}

func (l *Lease) String() string {
	return "Lease{" + l.res.Purpose + "/" + l.res.Digest[:11] + "…, fencing token " +
		strconv.FormatInt(l.record.FencingToken, 10) + ", " + l.State().String() + "}"
}
