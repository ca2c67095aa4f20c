package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"
)

// StopReason says why a term ended.
type StopReason string

const (
	// Resigned: Resign was called or the campaign's context ended; the lease was released.
	Resigned StopReason = "resigned"
	// LostLeadership: the service said the lease is gone (expired, taken over, broken).
	LostLeadership StopReason = "lost"
	// UnknownLeadership: a renew got no certain reply; the lease is no longer ours to use.
	UnknownLeadership StopReason = "unknown"
	// Expiring: local validity was about to end unrenewed (within LeadingMargin).
	Expiring StopReason = "expiring"
)

// Term is one term of leadership.
type Term struct {
	FencingToken int64
	Holder       string
	Lease        *Lease
	StartedAt    time.Time
}

// ElectionConfig configures a candidate, after client-go's leaderelection:
// OnStartedLeading runs in its own goroutine with a context cancelled when the
// term ends (always before the lease's local validity ends); OnStoppedLeading
// is called after it; OnNewLeader on every change of leader (holder label or
// term), for candidates and observers alike.
type ElectionConfig struct {
	Purpose string
	// RawID names the resource; Digest instead when computed elsewhere.
	RawID  string
	Digest string
	// Holder is this candidate's public label (required).
	Holder string
	// TTL of the leader's lease (default 15 s); Wait, how long each acquire
	// waits server-side (default 10 s); RetryPeriod, the pause after a
	// failure (default 1 s).
	TTL         time.Duration
	Wait        time.Duration
	RetryPeriod time.Duration
	// LeadingMargin: the term ends this long before local validity ends when
	// no renew landed (default TTL/10, at least one drift).
	LeadingMargin time.Duration
	LockDelay     time.Duration

	OnStartedLeading func(ctx context.Context, term Term)
	OnStoppedLeading func(term Term, reason StopReason)
	OnNewLeader      func(leader Leader)
}

// Election is a candidate for leadership of one resource: campaign = acquire
// with Wait and Holder; leader = inspect's holder; observe = long-poll;
// proclaim = renew with a new holder; resign = release (DESIGN §10).
// Safety comes from the lease, not from the callbacks: present
// term.FencingToken with every effect.
type Election struct {
	client *Client
	res    Resource
	cfg    ElectionConfig

	mu      sync.Mutex
	holder  string
	term    *Term
	cancel  context.CancelFunc
	done    chan struct{}
	rounds  int
	running bool
}

// NewElection makes a candidate; Campaign runs it.
func (c *Client) NewElection(cfg ElectionConfig) (*Election, error) {
	res := Resource{Purpose: cfg.Purpose, Digest: cfg.Digest}
	if cfg.RawID != "" {
		res.Digest = Digest(cfg.RawID)
	}
	if err := res.check(); err != nil {
		return nil, err
	}
	if cfg.Holder == "" {
		return nil, fmt.Errorf("leasehold: an election needs a holder label")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 10 * time.Second
	}
	if cfg.RetryPeriod <= 0 {
		cfg.RetryPeriod = time.Second
	}
	if cfg.LeadingMargin <= 0 {
		cfg.LeadingMargin = cfg.TTL / 10
	}
	return &Election{client: c, res: res, cfg: cfg, holder: cfg.Holder}, nil
}

// Resource is what the election is held on.
func (e *Election) Resource() Resource { return e.res }

// Term is the current term while leading, else nil.
func (e *Election) Term() *Term {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil || e.term.Lease.State() != Active {
		return nil
	}
	t := *e.term
	return &t
}

// IsLeader says whether this candidate leads now.
func (e *Election) IsLeader() bool { return e.Term() != nil }

// Leader is who leads now, by one plain inspect.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	in, err := e.client.Inspect(ctx, e.res, InspectOptions{})
	if err != nil {
		return Leader{}, err
	}
	return leaderOf(in), nil
}

// Observe follows the leader: the one found first, then every change. The
// channel is closed when ctx ends.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	return e.client.Observe(ctx, e.res, e.cfg.Wait)
}

// Campaign runs the election until Resign or until ctx ends (both release the
// lease): it acquires with Wait and Holder; when it wins it calls
// OnStartedLeading, keeps the lease renewed, and when the term ends calls
// OnStoppedLeading; a term that ended by itself is followed by a new
// campaign. It returns nil after a resignation, or the service's rejection
// of the requests as sent (ErrRejected: a TTL out of bounds, a bad API key).
func (e *Election) Campaign(ctx context.Context) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return fmt.Errorf("leasehold: a campaign is already running on this election")
	}
	ctx, cancel := context.WithCancel(ctx)
	e.running, e.cancel, e.done = true, cancel, make(chan struct{})
	done := e.done
	e.mu.Unlock()
	var followed sync.WaitGroup
	defer func() {
		cancel()
		followed.Wait()
		e.mu.Lock()
		e.running, e.cancel = false, nil
		e.mu.Unlock()
		close(done)
	}()
	if e.cfg.OnNewLeader != nil {
		followed.Add(1)
		go func() {
			defer followed.Done()
			for leader := range e.Observe(ctx) {
				e.safely("OnNewLeader", func() { e.cfg.OnNewLeader(leader) })
			}
		}()
	}
	for {
		lease, err := e.win(ctx)
		if err != nil || lease == nil {
			return err
		}
		if e.lead(ctx, lease) == Resigned {
			return nil
		}
	}
}

// Resign ends a running campaign: the term ends (its context cancelled), the
// lease is released, OnStoppedLeading(term, Resigned) is called and Campaign
// returns. Waits until it has (or ctx ends); returns at once without a campaign.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	cancel, done := e.cancel, e.done
	e.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Proclaim renews with holder = label (the fencing token stays; observers see
// a new leader label). ErrNotLeader when not leading or the lease is gone.
func (e *Election) Proclaim(ctx context.Context, label string) error {
	term := e.Term()
	if term == nil {
		return ErrNotLeader
	}
	out, err := term.Lease.Renew(ctx, label)
	if err != nil {
		return err
	}
	if out.Outcome == OutcomeLost {
		return fmt.Errorf("%w: the lease is gone (%s)", ErrNotLeader, out.Reason)
	}
	e.mu.Lock()
	e.holder = label
	if e.term != nil {
		e.term.Holder = label
	}
	e.mu.Unlock()
	return nil
}

// ErrNotLeader: Proclaim when not leading, or the lease turned out to be gone.
var ErrNotLeader = errors.New("leasehold: not the leader")

func (e *Election) safely(what string, fn func()) {
	defer func() {
		if p := recover(); p != nil {
			log.Printf("leasehold: election %s panicked: %v", what, p)
		}
	}()
	fn()
}

func (e *Election) newAttempt() (Attempt, error) {
	e.mu.Lock()
	e.rounds++
	n := e.rounds
	e.mu.Unlock()
	return NewAttempt(randomOperationID(fmt.Sprintf("campaign-%d", n)))
}

func (e *Election) cleanUp(a Attempt) {
	ctx, cancel := context.WithTimeout(context.Background(), e.client.timeout)
	defer cancel()
	_, _ = e.client.Release(ctx, e.res, a)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// win acquires until it holds (the lease), ctx ends (nil, nil), or the
// service rejects the requests as sent.
func (e *Election) win(ctx context.Context) (*Lease, error) {
	attempt, err := e.newAttempt()
	if err != nil {
		return nil, err
	}
	mayHold := false
	for {
		e.mu.Lock()
		holder := e.holder
		e.mu.Unlock()
		out, err := e.client.Acquire(ctx, e.res, attempt, AcquireOptions{
			TTL: e.cfg.TTL, Wait: e.cfg.Wait, Holder: holder, LockDelay: e.cfg.LockDelay,
		})
		if err == nil && out.Held() {
			return out.Lease, nil
		}
		if ctx.Err() != nil {
			// Stopped with the acquire in flight: it may have acquired just before.
			if mayHold || errors.Is(err, ErrIndeterminate) || err == nil {
				e.cleanUp(attempt)
			}
			return nil, nil
		}
		pause := e.cfg.RetryPeriod
		var le *Error
		switch {
		case err == nil && out.Outcome == OutcomeContended:
			mayHold = false
			if out.Waited >= e.cfg.Wait/2 {
				pause = 0
			} else if out.RetryAfter < pause {
				pause = out.RetryAfter
			}
		case err == nil && out.Outcome == OutcomeOwnerOperationConflict:
			if attempt, err = e.newAttempt(); err != nil {
				return nil, err
			}
			mayHold = false
		case err == nil:
			mayHold = false // limit_mismatch: pause, same attempt
		case errors.Is(err, ErrIndeterminate):
			mayHold = true
			pause = sameAttemptPause
		case errors.As(err, &le) && (le.Kind == ErrUnavailable || le.Kind == ErrOverloaded):
			if le.RetryAfter > 0 {
				pause = le.RetryAfter
			}
		default:
			if mayHold {
				e.cleanUp(attempt)
			}
			return nil, err
		}
		if !sleepCtx(ctx, pause) {
			if mayHold {
				e.cleanUp(attempt)
			}
			return nil, nil
		}
	}
}

// lead runs one term until ctx ends or the lease stops protecting it.
func (e *Election) lead(ctx context.Context, lease *Lease) StopReason {
	keeper := lease.Keep(e.cfg.LeadingMargin)
	e.mu.Lock()
	holder := lease.Record().Holder
	if holder == "" {
		holder = e.holder
	}
	term := Term{FencingToken: lease.FencingToken(), Holder: holder, Lease: lease, StartedAt: time.Now()}
	e.term = &term
	e.mu.Unlock()
	termCtx, endTerm := context.WithCancel(ctx)
	work := make(chan struct{})
	go func() {
		defer close(work)
		if e.cfg.OnStartedLeading != nil {
			e.safely("OnStartedLeading", func() { e.cfg.OnStartedLeading(termCtx, term) })
		}
	}()
	select {
	case <-ctx.Done():
	case <-lease.Lost():
	}
	// The term is over before anything else happens.
	endTerm()
	keeper.Stop()
	reason := Resigned
	switch state := lease.State(); {
	case state == Active:
		reason = Resigned
	case state == Unknown:
		reason = UnknownLeadership
	case lease.ExpiredLocally():
		reason = Expiring
	default:
		reason = LostLeadership
	}
	// The work stops before the lease is given back (while it still
	// protects it); past its validity it protects nothing, so wait no longer.
	wait := time.NewTimer(time.Until(lease.ValidUntil()))
	select {
	case <-work:
	case <-wait.C:
	}
	wait.Stop()
	if reason != LostLeadership {
		// Resigning gives the lease back; a term that ended with the lease
		// possibly still ours gives it back too, so the next leader need not
		// wait for the expiry.
		rctx, cancel := context.WithTimeout(context.Background(), e.client.timeout)
		_, _ = lease.Release(rctx)
		cancel()
	}
	e.mu.Lock()
	e.term = nil
	e.mu.Unlock()
	if e.cfg.OnStoppedLeading != nil {
		e.safely("OnStoppedLeading", func() { e.cfg.OnStoppedLeading(term, reason) })
	}
	return reason
}

// Observe follows the leader of res without campaigning (the Rust Observer):
// the leader found first, then every change (another holder label, another
// term, nobody), by inspect long-polls of up to wait each. The channel is
// closed when ctx ends.
func (c *Client) Observe(ctx context.Context, res Resource, wait time.Duration) <-chan Leader {
	if wait <= 0 {
		wait = 10 * time.Second
	}
	out := make(chan Leader)
	go func() {
		defer close(out)
		version := ""
		var last *Leader
		for ctx.Err() == nil {
			asked := time.Now()
			in, err := c.Inspect(ctx, res, InspectOptions{ChangedSince: version, Wait: wait})
			if err != nil {
				pause := time.Second
				var le *Error
				if errors.As(err, &le) && le.RetryAfter > 0 {
					pause = le.RetryAfter
				}
				if le != nil && le.Kind == ErrRejected {
					pause = 5 * time.Second
				}
				sleepCtx(ctx, pause)
				continue
			}
			if version != "" && version == in.Version && time.Since(asked) < wait/2 {
				// Unchanged well before the wait was over: a service that
				// does not hold long-polls. Poll at a second, not in a tight loop.
				sleepCtx(ctx, time.Second)
			}
			version = in.Version
			leader := leaderOf(in)
			if last != nil && *last == leader {
				continue
			}
			last = &leader
			select {
			case out <- leader:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
