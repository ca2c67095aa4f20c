package leasehold

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// APIKey is sent as "Authorization: Bearer <key>" when set.
	APIKey string
	// Timeout bounds one request (an acquire adds its wait); default 5 s.
	Timeout time.Duration
	// ConnectTimeout bounds connecting (a connect failure is unavailable);
	// default 1 s. Ignored when HTTPClient is given.
	ConnectTimeout time.Duration
	// DriftBudget and DriftFraction: each lease's local validity is
	// min(TTL, remainingMs) − max(DriftBudget, DriftFraction × TTL) from the
	// send (default max(10 ms, 1 %), DESIGN §14).
	DriftBudget   time.Duration
	DriftFraction float64
	// CAFile (PEM) is the only trust for https:// when set (else the
	// system's roots); ClientCertFile and ClientKeyFile (PEM) present a
	// client certificate (for LEASEHOLD_TLS_CLIENT_CA_FILE). An untrusted
	// server is ErrUnavailable with cause tls (nothing was sent).
	CAFile         string
	ClientCertFile string
	ClientKeyFile  string
	// HTTPClient replaces the default one (and the TLS options above). Its
	// own Timeout should be zero: the client bounds each request itself.
	HTTPClient *http.Client
}

func tlsConfig(opts Options) (*tls.Config, error) {
	if opts.CAFile == "" && opts.ClientCertFile == "" && opts.ClientKeyFile == "" {
		return nil, nil
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("leasehold: reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("leasehold: no certificate in the CA file %s", opts.CAFile)
		}
		config.RootCAs = pool
	}
	if opts.ClientCertFile != "" || opts.ClientKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(opts.ClientCertFile, opts.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("leasehold: loading the client certificate: %w", err)
		}
		config.Certificates = []tls.Certificate{cert}
	}
	return config, nil
}

// Client speaks leasehold's HTTP API. It is safe for concurrent use.
type Client struct {
	base           string
	apiKey         string
	http           *http.Client
	timeout        time.Duration
	driftBudget    time.Duration
	driftFraction  float64
	connectTimeout time.Duration
}

// New is a client of the service at baseURL (http:// or https://).
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("leasehold: base URL %q must be an absolute http:// or https:// URL without query or fragment", baseURL)
	}
	for _, ch := range opts.APIKey {
		if ch < 0x21 || ch > 0x7e {
			return nil, fmt.Errorf("leasehold: the API key must be visible ASCII")
		}
	}
	c := &Client{
		base:           strings.TrimRight(baseURL, "/"),
		apiKey:         opts.APIKey,
		timeout:        opts.Timeout,
		driftBudget:    opts.DriftBudget,
		driftFraction:  opts.DriftFraction,
		connectTimeout: opts.ConnectTimeout,
	}
	if c.timeout <= 0 {
		c.timeout = 5 * time.Second
	}
	if c.connectTimeout <= 0 {
		c.connectTimeout = time.Second
	}
	if c.driftBudget <= 0 {
		c.driftBudget = 10 * time.Millisecond
	}
	if c.driftFraction <= 0 || c.driftFraction > 0.5 {
		c.driftFraction = 0.01
	}
	c.http = opts.HTTPClient
	if c.http == nil {
		tlsConf, err := tlsConfig(opts)
		if err != nil {
			return nil, err
		}
		dialer := &net.Dialer{Timeout: c.connectTimeout, KeepAlive: 30 * time.Second}
		c.http = &http.Client{
			Transport: &http.Transport{
				TLSClientConfig:     tlsConf,
				DialContext:         dialer.DialContext,
				TLSHandshakeTimeout: c.connectTimeout,
				MaxIdleConnsPerHost: 16,
				IdleConnTimeout:     60 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return c, nil
}

// BaseURL is the service's URL without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// CloseIdleConnections closes the keep-alive connections not in use.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// DriftFor is the drift allowed a lease of ttl: max(DriftBudget, DriftFraction × ttl).
func (c *Client) DriftFor(ttl time.Duration) time.Duration {
	d := time.Duration(float64(ttl) * c.driftFraction)
	if d < c.driftBudget {
		return c.driftBudget
	}
	return d
}

func (c *Client) leaseURL(r Resource) string {
	return c.base + "/leases/" + r.Purpose + "/" + r.Digest
}

// bounded is ctx with the client's timeout plus extra.
func (c *Client) bounded(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout+extra)
}

// CreateAttempt asks the service for an attempt (POST /attempts). It is
// stateless on the server; NewAttempt makes one locally without a round trip.
func (c *Client) CreateAttempt(ctx context.Context, operationID string) (Attempt, error) {
	if !operationIDPattern.MatchString(operationID) {
		return Attempt{}, fmt.Errorf("leasehold: operation id %q must be 1-128 characters of [A-Za-z0-9._~-]", operationID)
	}
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	r, err := c.call(ctx, http.MethodPost, c.base+"/attempts", "attempt", nil, map[string]string{"operationId": operationID})
	if err != nil {
		return Attempt{}, err
	}
	if r.body.Outcome != "attempt_created" {
		return Attempt{}, r.failure("attempt", operationID)
	}
	a, aerr := AttemptOf(r.body.OwnerToken, r.body.OperationID)
	if aerr != nil || a.operationID != operationID {
		return Attempt{}, r.unexpected("attempt", operationID)
	}
	return a, nil
}

// The outcomes of an acquire (DESIGN §2).
const (
	OutcomeAcquired               = "acquired"
	OutcomeReplayed               = "replayed_same_operation"
	OutcomeContended              = "contended"
	OutcomeOwnerOperationConflict = "owner_operation_conflict"
	OutcomeLimitMismatch          = "limit_mismatch"
	OutcomeRenewed                = "renewed"
	OutcomeLost                   = "lost"
	OutcomeReleased               = "released"
	OutcomeAlreadyAbsent          = "already_absent"
	OutcomeNotOwner               = "not_owner"
)

// AcquireOptions shape an acquire. TTL is required.
type AcquireOptions struct {
	TTL time.Duration
	// Wait blocks server-side up to this long while someone else holds it.
	Wait time.Duration
	// Holder is a public label (a pod name, host:port): never a secret.
	Holder string
	// Limit > 1 makes a counting lease; Mode "shared" a shared one.
	Limit     int
	Mode      string
	LockDelay time.Duration
}

func (o AcquireOptions) body() map[string]any {
	b := map[string]any{"ttlMs": ms(o.TTL)}
	if ms(o.Wait) > 0 {
		b["waitMs"] = ms(o.Wait)
	}
	if o.Holder != "" {
		b["holder"] = o.Holder
	}
	if o.Limit > 1 {
		b["limit"] = o.Limit
	}
	if o.Mode != "" && o.Mode != "exclusive" {
		b["mode"] = o.Mode
	}
	if ms(o.LockDelay) > 0 {
		b["lockDelayMs"] = ms(o.LockDelay)
	}
	return b
}

// AcquireOutcome is what an acquire answered. Lease is set for acquired and
// replayed_same_operation (Held); RetryAfter for contended and
// owner_operation_conflict; Limit for limit_mismatch.
type AcquireOutcome struct {
	Outcome string
	Lease   *Lease
	Waited  time.Duration
	// RetryAfter is the holder's remaining time (retryAfterMs).
	RetryAfter time.Duration
	// Reason is contended's reason (lock_delay), else empty.
	Reason string
	Limit  int
}

// Held says whether this attempt holds the lease now.
func (o AcquireOutcome) Held() bool { return o.Lease != nil }

// Acquire sends PUT /leases/{purpose}/{digest} with attempt. A held lease
// comes back with a Lease handle whose local validity counts from this
// request's send (plus the time waited). An error matching ErrIndeterminate
// may have applied: retry with the same attempt (a replay tells).
func (c *Client) Acquire(ctx context.Context, res Resource, attempt Attempt, opts AcquireOptions) (AcquireOutcome, error) {
	if err := res.check(); err != nil {
		return AcquireOutcome{}, err
	}
	if !attempt.valid() {
		return AcquireOutcome{}, fmt.Errorf("leasehold: acquire needs an attempt (NewAttempt)")
	}
	if opts.TTL <= 0 {
		return AcquireOutcome{}, fmt.Errorf("leasehold: acquire needs a TTL")
	}
	op := attempt.operationID
	ctx, cancel := c.bounded(ctx, opts.Wait)
	defer cancel()
	sent := time.Now()
	r, err := c.call(ctx, http.MethodPut, c.leaseURL(res), "acquire", &attempt, opts.body())
	if err != nil {
		return AcquireOutcome{}, err
	}
	b := r.body
	switch b.Outcome {
	case OutcomeAcquired, OutcomeReplayed:
		rec, rerr := r.record(res, "acquire", op)
		if rerr != nil {
			return AcquireOutcome{}, rerr
		}
		var waited time.Duration
		if b.WaitedMs != nil && *b.WaitedMs > 0 {
			waited = millis(*b.WaitedMs)
		}
		start := sent
		if b.Outcome == OutcomeAcquired {
			start = sent.Add(waited)
		}
		lease := newLease(c, res, attempt, rec, start, opts.TTL)
		return AcquireOutcome{Outcome: b.Outcome, Lease: lease, Waited: waited}, nil
	case OutcomeContended, OutcomeOwnerOperationConflict:
		if !r.ok || b.RetryAfterMs == nil {
			return AcquireOutcome{}, r.unexpected("acquire", op)
		}
		out := AcquireOutcome{Outcome: b.Outcome, RetryAfter: retryAfter(b.RetryAfterMs)}
		if b.WaitedMs != nil {
			out.Waited = millis(*b.WaitedMs)
		}
		if b.Reason != nil {
			out.Reason = *b.Reason
		}
		return out, nil
	case OutcomeLimitMismatch:
		if !r.ok || b.Limit == nil {
			return AcquireOutcome{}, r.unexpected("acquire", op)
		}
		return AcquireOutcome{Outcome: b.Outcome, Limit: *b.Limit}, nil
	}
	return AcquireOutcome{}, r.failure("acquire", op)
}

// RenewOutcome is what a renew answered: renewed (Record) or lost (Reason:
// absent, not_owner, revoked, max_hold, ...).
type RenewOutcome struct {
	Outcome string
	Record  LeaseRecord
	Reason  string
}

// Renew sends PATCH: resets the TTL (and the public holder label when given).
// A Lease handle calls this for you and tracks the result.
func (c *Client) Renew(ctx context.Context, res Resource, attempt Attempt, ttl time.Duration, holder string) (RenewOutcome, error) {
	if err := res.check(); err != nil {
		return RenewOutcome{}, err
	}
	body := map[string]any{"ttlMs": ms(ttl)}
	if holder != "" {
		body["holder"] = holder
	}
	op := attempt.operationID
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	r, err := c.call(ctx, http.MethodPatch, c.leaseURL(res), "renew", &attempt, body)
	if err != nil {
		return RenewOutcome{}, err
	}
	switch r.body.Outcome {
	case OutcomeRenewed:
		rec, rerr := r.record(res, "renew", op)
		if rerr != nil {
			return RenewOutcome{}, rerr
		}
		return RenewOutcome{Outcome: OutcomeRenewed, Record: rec}, nil
	case OutcomeLost:
		if !r.ok || r.body.Reason == nil {
			return RenewOutcome{}, r.unexpected("renew", op)
		}
		return RenewOutcome{Outcome: OutcomeLost, Reason: *r.body.Reason}, nil
	}
	return RenewOutcome{}, r.failure("renew", op)
}

// ReleaseOutcome is what a release answered: released, already_absent
// (idempotent; Reason revoked when an operator broke it) or not_owner.
type ReleaseOutcome struct {
	Outcome string
	Reason  string
}

// Release sends DELETE (idempotent).
func (c *Client) Release(ctx context.Context, res Resource, attempt Attempt) (ReleaseOutcome, error) {
	if err := res.check(); err != nil {
		return ReleaseOutcome{}, err
	}
	op := attempt.operationID
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	r, err := c.call(ctx, http.MethodDelete, c.leaseURL(res), "release", &attempt, nil)
	if err != nil {
		return ReleaseOutcome{}, err
	}
	switch r.body.Outcome {
	case OutcomeReleased, OutcomeAlreadyAbsent, OutcomeNotOwner:
		out := ReleaseOutcome{Outcome: r.body.Outcome}
		if r.body.Reason != nil {
			out.Reason = *r.body.Reason
		}
		return out, nil
	}
	return ReleaseOutcome{}, r.failure("release", op)
}

// InspectOptions: Attempt (optional) makes the answer say HeldBy;
// ChangedSince with Wait is the long-poll (answers once the version differs
// from ChangedSince, or after Wait unchanged).
type InspectOptions struct {
	Attempt      *Attempt
	ChangedSince string
	Wait         time.Duration
}

// Inspect sends GET: a read-only view of the resource.
func (c *Client) Inspect(ctx context.Context, res Resource, opts InspectOptions) (Inspection, error) {
	if err := res.check(); err != nil {
		return Inspection{}, err
	}
	u := c.leaseURL(res)
	extra := time.Duration(0)
	if opts.ChangedSince != "" {
		q := url.Values{"changedSince": {opts.ChangedSince}, "waitMs": {fmt.Sprint(ms(opts.Wait))}}
		u += "?" + q.Encode()
		extra = opts.Wait
	}
	op := "inspect"
	if opts.Attempt != nil {
		op = opts.Attempt.operationID
	}
	ctx, cancel := c.bounded(ctx, extra)
	defer cancel()
	r, err := c.call(ctx, http.MethodGet, u, "inspect", opts.Attempt, nil)
	if err != nil {
		return Inspection{}, err
	}
	if r.body.Outcome != "inspected" {
		return Inspection{}, r.failure("inspect", op)
	}
	in, ok := inspection(r.raw)
	if !ok {
		return Inspection{}, r.unexpected("inspect", op)
	}
	return in, nil
}

// ListedLease is one lease of a listing.
type ListedLease struct {
	Digest       string   `json:"digest"`
	Holder       string   `json:"holder,omitempty"`
	FencingToken int64    `json:"fencingToken"`
	RemainingMs  int64    `json:"remainingMs"`
	TTLMs        int64    `json:"ttlMs"`
	AcquiredAt   string   `json:"acquiredAt"`
	RenewedAt    string   `json:"renewedAt"`
	Holders      int      `json:"holders"`
	Limit        int      `json:"limit"`
	Mode         string   `json:"mode"`
	Permits      []Permit `json:"permits,omitempty"`
}

// Listed is one page of a listing; NextCursor is empty on the last page.
type Listed struct {
	Leases     []ListedLease `json:"leases"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

// List sends GET /leases/{purpose}: one page (limit 1-1000, zero: the
// service's default of 100) of the leases held on purpose, from cursor (a
// NextCursor sent back unchanged; empty: the start). On Redis a lease may
// appear on two pages; de-duplicate by digest if it matters.
func (c *Client) List(ctx context.Context, purpose string, limit int, cursor string) (Listed, error) {
	if !purposePattern.MatchString(purpose) {
		return Listed{}, fmt.Errorf("leasehold: purpose %q must match %s", purpose, purposePattern)
	}
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	u := c.base + "/leases/" + purpose
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	r, err := c.call(ctx, http.MethodGet, u, "list", nil, nil)
	if err != nil {
		return Listed{}, err
	}
	if r.body.Outcome != "listed" {
		return Listed{}, r.failure("list", "list")
	}
	var page Listed
	if !jsonObject(r.raw, &page) || page.Leases == nil {
		return Listed{}, r.unexpected("list", "list")
	}
	return page, nil
}
