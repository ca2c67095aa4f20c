// Package leasehold is the Go client of leasehold, an HTTP/JSON lease service
// (docs/design.md in the repository). Standard library only.
//
// The pieces and the contract they keep (DESIGN §3, §5, §15):
//
//   - Client: one method per verb (Acquire, Renew, Release, Inspect,
//     CreateAttempt), each answering a typed outcome or an *Error whose kind
//     says what the caller may assume: errors.Is(err, ErrUnavailable) and
//     ErrOverloaded were definitely not applied, ErrIndeterminate may have
//     been (retry with the same Attempt; a replay tells).
//   - Attempt: made before the first acquire (NewAttempt), so a retry after a
//     lost reply is recognised as the same acquisition.
//   - Lease: a held lease with the closed state machine Active → Lost |
//     Released | Unknown (terminal); local validity is min(TTL, remainingMs)
//     − drift counted from when the request was sent, drift = max(10 ms,
//     1 % of the TTL). Keep starts a watchdog renewing at about a third of
//     the validity left.
//   - Lock / WithLock: acquire (retrying an indeterminate answer with the
//     same attempt), keep, and a context cancelled one drift before local
//     validity ends or when the lease is lost.
//   - Election: Campaign, Resign, Observe, Proclaim with OnStartedLeading /
//     OnStoppedLeading / OnNewLeader callbacks, as client-go's leaderelection.
//   - Watch: the resource's server-sent events, resumed with Last-Event-ID.
//   - CheckFencingToken: the PostgreSQL guard for database/sql (DESIGN §16).
package leasehold
