package leasehold

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// sameAttemptPause is the pause before asking again with the same attempt
// after an uncertain answer.
const sameAttemptPause = 50 * time.Millisecond

// LockOptions shape Lock and WithLock. TTL is required.
type LockOptions struct {
	TTL time.Duration
	// Wait blocks server-side up to this long while someone else holds it;
	// zero: no wait (contended at once gives ErrNotAcquired).
	Wait      time.Duration
	Holder    string
	Limit     int
	Mode      string
	LockDelay time.Duration
	// OperationID of the one attempt Lock acquires with (random when empty).
	OperationID string
	// RetryBudget bounds, beyond Wait, how long an indeterminate, unavailable
	// or overloaded acquire is retried with the same attempt; default 5 s.
	RetryBudget time.Duration
	// StopMargin: the lock's context is cancelled this long before local
	// validity ends when no renew landed; zero means one drift (DESIGN §14).
	StopMargin time.Duration
	// OnLost is called once (in its own goroutine) when the lease is lost
	// or unknown, or given up before its validity ends.
	OnLost func(*Lease)
}

// Lock is a held lease with its watchdog. Its context (from Client.Lock) is
// cancelled on loss, one stop margin before local validity ends, or on Unlock.
type Lock struct {
	// Lease is the held lease: present its FencingToken with every effect.
	Lease *Lease
	// Attempt is the one attempt every acquire request carried.
	Attempt Attempt
	// Outcome of the acquire that held it: acquired or replayed_same_operation.
	Outcome string
	// AcquireRequests is how many acquire requests were sent.
	AcquireRequests int
	keeper          *Keeper
	cancel          context.CancelFunc
	ctx             context.Context
}

func randomOperationID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Lock acquires purpose/rawID with one attempt made before the first send
// (an indeterminate answer, or an unavailable or overloaded one, is retried
// with the same attempt within Wait + RetryBudget), starts a watchdog, and
// returns the lock and a context derived from ctx that is cancelled when the
// lease is lost or unknown, one stop margin before its local validity ends,
// or on Unlock. Call Unlock when done (it releases). Contended (or any
// answer that does not hold it) is a *NotAcquiredError.
func (c *Client) Lock(ctx context.Context, purpose, rawID string, opts LockOptions) (*Lock, context.Context, error) {
	res, err := NewResource(purpose, rawID)
	if err != nil {
		return nil, nil, err
	}
	return c.LockResource(ctx, res, opts)
}

// LockResource is Lock for a Resource (a digest computed elsewhere).
func (c *Client) LockResource(ctx context.Context, res Resource, opts LockOptions) (*Lock, context.Context, error) {
	if opts.OperationID == "" {
		opts.OperationID = randomOperationID("lock")
	}
	if opts.RetryBudget <= 0 {
		opts.RetryBudget = 5 * time.Second
	}
	attempt, err := NewAttempt(opts.OperationID)
	if err != nil {
		return nil, nil, err
	}
	lock := &Lock{Attempt: attempt}
	started := time.Now()
	deadline := started.Add(opts.Wait + opts.RetryBudget)
	mayHold := false
	for {
		lock.AcquireRequests++
		wait := opts.Wait - time.Since(started)
		if wait < 0 {
			wait = 0
		}
		out, err := c.Acquire(ctx, res, attempt, AcquireOptions{
			TTL: opts.TTL, Wait: wait, Holder: opts.Holder, Limit: opts.Limit, Mode: opts.Mode, LockDelay: opts.LockDelay,
		})
		if err == nil {
			lock.Outcome = out.Outcome
			if !out.Held() {
				return nil, nil, &NotAcquiredError{Outcome: out}
			}
			lock.Lease = out.Lease
			break
		}
		var pause time.Duration
		var e *Error
		switch {
		case errors.Is(err, ErrIndeterminate):
			mayHold = true
			pause = sameAttemptPause
		case errors.As(err, &e) && (e.Kind == ErrUnavailable || e.Kind == ErrOverloaded) && ctx.Err() == nil:
			pause = e.RetryAfter
			if pause < sameAttemptPause {
				pause = sameAttemptPause
			}
			if pause > time.Second {
				pause = time.Second
			}
		default:
			return nil, nil, c.lockCleanUp(res, attempt, mayHold, err)
		}
		if ctx.Err() != nil || !time.Now().Add(pause).Before(deadline) {
			return nil, nil, c.lockCleanUp(res, attempt, mayHold, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, c.lockCleanUp(res, attempt, mayHold, ctx.Err())
		case <-t.C:
		}
	}
	lease := lock.Lease
	lock.ctx, lock.cancel = context.WithCancel(ctx)
	if opts.OnLost != nil {
		lease.OnLost(opts.OnLost)
	}
	lease.OnLost(func(*Lease) { lock.cancel() })
	lock.keeper = lease.Keep(opts.StopMargin)
	return lock, lock.ctx, nil
}

// lockCleanUp releases what an uncertain acquire may have taken.
func (c *Client) lockCleanUp(res Resource, attempt Attempt, mayHold bool, err error) error {
	if mayHold {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		_, _ = c.Release(ctx, res, attempt)
	}
	return err
}

// Context is the lock's context (the one Lock returned).
func (l *Lock) Context() context.Context { return l.ctx }

// Keeper is the lock's watchdog.
func (l *Lock) Keeper() *Keeper { return l.keeper }

// Unlock stops the watchdog, cancels the lock's context and releases the
// lease (unless it is already released). A lease that was lost is still
// released (clean-up); the error then is a *LeaseLostError unless the
// release itself failed.
func (l *Lock) Unlock(ctx context.Context) error {
	l.keeper.Stop()
	state := l.Lease.State()
	l.cancel()
	if state == Released {
		return nil
	}
	_, err := l.Lease.Release(ctx)
	if err != nil {
		return err
	}
	if state != Active {
		return l.Lease.lostError(state)
	}
	return nil
}

// WithLock runs fn under the lease: fn's context is cancelled when the lease
// stops protecting the work (see Lock), carries the lease (LeaseFrom), and the
// lease is released when fn returns. fn's error is returned as is; when fn succeeded but the lease was
// lost meanwhile, a *LeaseLostError (errors.Is ErrLeaseLost).
func (c *Client) WithLock(ctx context.Context, purpose, rawID string, opts LockOptions, fn func(context.Context) error) error {
	lock, lockCtx, err := c.Lock(ctx, purpose, rawID, opts)
	if err != nil {
		return err
	}
	workErr := fn(context.WithValue(lockCtx, leaseKey{}, lock.Lease))
	stopCtx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	unlockErr := lock.Unlock(stopCtx)
	if workErr != nil {
		return workErr
	}
	var lost *LeaseLostError
	if errors.As(unlockErr, &lost) {
		return unlockErr
	}
	return nil
}

type leaseKey struct{}

// LeaseFrom is the lease WithLock runs fn under (nil outside WithLock).
func LeaseFrom(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}
