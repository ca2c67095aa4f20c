package leasehold

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The kinds of failure every call may answer. Test with errors.Is; errors.As
// with *Error gives the details (the problem's fields, a retry hint).
var (
	// ErrUnavailable: definitely not applied. The service or its store could
	// not be reached, or the request never left this process.
	ErrUnavailable = errors.New("leasehold: unavailable (definitely not applied)")
	// ErrOverloaded: shed by the service's admission limit before it touched
	// the store; definitely not applied.
	ErrOverloaded = errors.New("leasehold: overloaded (definitely not applied)")
	// ErrIndeterminate: sent, and no certain answer came back (a timeout, a
	// connection lost after the write, a reply off the contract). It may have
	// applied: inspect, or retry with the same attempt.
	ErrIndeterminate = errors.New("leasehold: indeterminate (may have applied)")
	// ErrRejected: the service refused the request as sent (a 4xx problem
	// such as invalid_request, unauthorized, forbidden).
	ErrRejected = errors.New("leasehold: rejected")
	// ErrInvalidRequest: a rejection with outcome invalid_request; it also
	// matches ErrRejected.
	ErrInvalidRequest = errors.New("leasehold: invalid request")
	// ErrRefused: a renew on a terminal handle, refused locally (nothing sent).
	ErrRefused = errors.New("leasehold: refused locally: the lease handle is terminal")
	// ErrNotAcquired: Lock or WithLock did not get the lease (contended, or
	// another outcome that does not hold it).
	ErrNotAcquired = errors.New("leasehold: not acquired")
	// ErrLeaseLost: the lease stopped protecting the work (lost, unknown, or
	// its local validity about to end).
	ErrLeaseLost = errors.New("leasehold: lease lost")
)

// FieldError is one invalid field of an invalid_request problem.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an application/problem+json answer (RFC 9457) as the service
// sent it, with leasehold's outcome member.
type Problem struct {
	Type    string       `json:"type"`
	Title   string       `json:"title"`
	Status  int          `json:"status"`
	Detail  string       `json:"detail"`
	Outcome string       `json:"outcome"`
	Errors  []FieldError `json:"errors,omitempty"`
}

// Error is every failure a call answers. Kind is one of ErrUnavailable,
// ErrOverloaded, ErrIndeterminate, ErrRejected (errors.Is matches it, and
// ErrInvalidRequest for an invalid_request).
type Error struct {
	Kind error
	// Op is the verb: attempt, acquire, renew, release, inspect, watch.
	Op string
	// Cause: connect, tls, canceled (nothing sent), timeout, connection_lost
	// (sent), service (the service's own answer), unexpected_reply.
	Cause string
	// OperationID of the attempt it was sent with, if any: retry with it.
	OperationID string
	// RetryAfter is the service's hint (retryAfterMs), zero without one.
	RetryAfter time.Duration
	// Problem is the problem+json answer when one arrived.
	Problem *Problem
	// Err is the transport error underneath, if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(e.Kind.Error(), "leasehold: "))
	fmt.Fprintf(&b, " (%s", e.Op)
	if e.Cause != "" {
		b.WriteString(", " + e.Cause)
	}
	if e.Problem != nil {
		fmt.Fprintf(&b, ", %d %s", e.Problem.Status, e.Problem.Outcome)
		if e.Problem.Detail != "" {
			b.WriteString(": " + e.Problem.Detail)
		}
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	b.WriteString(")")
	return "leasehold: " + b.String()
}

// Is matches the error's kind.
func (e *Error) Is(target error) bool {
	if target == e.Kind {
		return true
	}
	return target == ErrInvalidRequest && e.Kind == ErrRejected && e.Problem != nil &&
		e.Problem.Outcome == "invalid_request"
}

// Unwrap gives the transport error underneath.
func (e *Error) Unwrap() error { return e.Err }

// NotAcquiredError is Lock's answer when the lease is held by someone else
// (or by this owner token for another operation).
type NotAcquiredError struct {
	Outcome AcquireOutcome
}

func (e *NotAcquiredError) Error() string {
	s := "leasehold: not acquired: " + e.Outcome.Outcome
	if e.Outcome.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.Outcome.RetryAfter)
	}
	return s
}

// Is matches ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// LeaseLostError says the lease stopped protecting the work.
type LeaseLostError struct {
	State        State
	FencingToken int64
	// Reason is the service's reason when a renew answered lost (absent,
	// not_owner, revoked, max_hold), else empty.
	Reason string
}

func (e *LeaseLostError) Error() string {
	s := fmt.Sprintf("leasehold: lease lost (state %s, fencing token %d", e.State, e.FencingToken)
	if e.Reason != "" {
		s += ", reason " + e.Reason
	}
	return s + ")"
}

// Is matches ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }
