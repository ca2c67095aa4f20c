package leasehold

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"
)

var (
	purposePattern     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	digestPattern      = regexp.MustCompile(`^v1\.[0-9a-f]{64}$`)
	operationIDPattern = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}$`)
	ownerTokenPattern  = regexp.MustCompile(`^[A-Za-z0-9_-]{32}$`)
)

// Digest is the resource digest of a raw id: "v1." + the lowercase hex SHA-256 of
// the raw id. The service never sees raw ids (DESIGN §1).
func Digest(rawID string) string {
	sum := sha256.Sum256([]byte(rawID))
	return "v1." + hex.EncodeToString(sum[:])
}

// Resource names one lease: a purpose and a resource digest.
type Resource struct {
	Purpose string
	Digest  string
}

// NewResource is the resource of rawID under purpose; it fails on a purpose
// that is not `^[a-z][a-z0-9-]{0,62}$`.
func NewResource(purpose, rawID string) (Resource, error) {
	r := Resource{Purpose: purpose, Digest: Digest(rawID)}
	return r, r.check()
}

func (r Resource) check() error {
	if !purposePattern.MatchString(r.Purpose) {
		return fmt.Errorf("leasehold: purpose %q must match %s", r.Purpose, purposePattern)
	}
	if !digestPattern.MatchString(r.Digest) {
		return fmt.Errorf("leasehold: digest %q must be v1. and 64 lowercase hex digits", r.Digest)
	}
	return nil
}

func (r Resource) String() string { return r.Purpose + "/" + r.Digest }

// Attempt is one unit of work: an owner token and an operation id. It is made
// before the first acquire, so that a retry after a lost reply is told apart
// from a new acquisition (DESIGN §1). The owner token is a bearer secret: it is
// never printed (String and GoString redact it).
type Attempt struct {
	ownerToken  string
	operationID string
}

// NewAttempt makes an attempt locally: 24 bytes from the OS CSPRNG, base64url
// without padding, for operationID (1-128 characters of [A-Za-z0-9._~-]).
func NewAttempt(operationID string) (Attempt, error) {
	if !operationIDPattern.MatchString(operationID) {
		return Attempt{}, fmt.Errorf("leasehold: operation id %q must be 1-128 characters of [A-Za-z0-9._~-]", operationID)
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Attempt{}, fmt.Errorf("leasehold: reading the OS random source: %w", err)
	}
	return Attempt{ownerToken: base64.RawURLEncoding.EncodeToString(raw[:]), operationID: operationID}, nil
}

// AttemptOf rebuilds an attempt kept elsewhere (a state file).
func AttemptOf(ownerToken, operationID string) (Attempt, error) {
	if !ownerTokenPattern.MatchString(ownerToken) {
		return Attempt{}, fmt.Errorf("leasehold: an owner token is 32 characters of base64url")
	}
	if !operationIDPattern.MatchString(operationID) {
		return Attempt{}, fmt.Errorf("leasehold: operation id %q must be 1-128 characters of [A-Za-z0-9._~-]", operationID)
	}
	return Attempt{ownerToken: ownerToken, operationID: operationID}, nil
}

// OwnerToken is the secret half of the attempt; keep it out of logs.
func (a Attempt) OwnerToken() string { return a.ownerToken }

// OperationID is the caller's id of this unit of work.
func (a Attempt) OperationID() string { return a.operationID }

// String prints the operation id and a redacted token.
func (a Attempt) String() string { return "Attempt{" + a.operationID + ", token: <redacted>}" }

// GoString keeps %#v from printing the token.
func (a Attempt) GoString() string { return a.String() }

func (a Attempt) valid() bool { return a.ownerToken != "" && a.operationID != "" }

// LeaseRecord is the lease as an acquire, replay or renew answered it.
type LeaseRecord struct {
	Purpose      string `json:"purpose"`
	Digest       string `json:"digest"`
	FencingToken int64  `json:"fencingToken"`
	TTLMs        int64  `json:"ttlMs"`
	RemainingMs  int64  `json:"remainingMs"`
	Guarantee    string `json:"guarantee"`
	AcquiredAt   string `json:"acquiredAt"`
	RenewedAt    string `json:"renewedAt"`
	Holder       string `json:"holder,omitempty"`
	MaxHoldMs    *int64 `json:"maxHoldMs,omitempty"`
}

// Permit is one holder of a counting or shared lease, as inspect shows it.
type Permit struct {
	Holder       string `json:"holder,omitempty"`
	FencingToken int64  `json:"fencingToken"`
	RemainingMs  int64  `json:"remainingMs"`
	TTLMs        int64  `json:"ttlMs"`
}

// Inspection is a read-only view of a resource (inspect, long-poll, watch).
type Inspection struct {
	Held         bool     `json:"held"`
	Version      string   `json:"version"`
	RemainingMs  *int64   `json:"remainingMs,omitempty"`
	FencingToken *int64   `json:"fencingToken,omitempty"`
	HeldBy       string   `json:"heldBy,omitempty"`
	Holder       string   `json:"holder,omitempty"`
	TTLMs        *int64   `json:"ttlMs,omitempty"`
	AcquiredAt   string   `json:"acquiredAt,omitempty"`
	RenewedAt    string   `json:"renewedAt,omitempty"`
	Holders      int      `json:"holders,omitempty"`
	Limit        *int     `json:"limit,omitempty"`
	Mode         string   `json:"mode,omitempty"`
	Permits      []Permit `json:"permits,omitempty"`
}

// Leader is who leads an election, as inspect shows it; FencingToken is zero
// when nobody leads.
type Leader struct {
	Holder       string
	FencingToken int64
}

// IsHeld says whether anybody leads.
func (l Leader) IsHeld() bool { return l.FencingToken != 0 }

func leaderOf(in Inspection) Leader {
	if !in.Held || in.FencingToken == nil {
		return Leader{}
	}
	return Leader{Holder: in.Holder, FencingToken: *in.FencingToken}
}

// State is where a lease handle stands. Lost, Released and Unknown are terminal.
type State int

const (
	// Active: held, and locally valid until ValidUntil.
	Active State = iota
	// Lost: the service said it is gone, or local validity ran out.
	Lost
	// Released: released by this handle.
	Released
	// Unknown: a renew or release got no certain answer; no longer ours to use.
	Unknown
)

func (s State) String() string {
	switch s {
	case Active:
		return "active"
	case Lost:
		return "lost"
	case Released:
		return "released"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Terminal says whether the state can no longer change.
func (s State) Terminal() bool { return s != Active }

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond/2) / time.Millisecond)
}

func millis(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
