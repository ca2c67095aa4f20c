package leasehold

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

// The headers the attempt travels in (DESIGN §2).
const (
	ownerTokenHeader  = "Lease-Owner-Token"
	operationIDHeader = "Lease-Operation-Id"
	// maxReply bounds how much of an answer is read.
	maxReply = 1 << 20
)

// reply is an answer that arrived: its status and its JSON object.
type reply struct {
	status int
	raw    []byte
	body   wireBody
	// ok says the body was a JSON object of the expected shape.
	ok bool
}

// wireBody holds every member a lease answer or a problem may carry.
type wireBody struct {
	Outcome      string       `json:"outcome"`
	Lease        *LeaseRecord `json:"lease"`
	WaitedMs     *int64       `json:"waitedMs"`
	RetryAfterMs *int64       `json:"retryAfterMs"`
	Reason       *string      `json:"reason"`
	Limit        *int         `json:"limit"`
	OwnerToken   string       `json:"ownerToken"`
	OperationID  string       `json:"operationId"`
	Type         string       `json:"type"`
	Title        string       `json:"title"`
	Status       int          `json:"status"`
	Detail       string       `json:"detail"`
	Errors       []FieldError `json:"errors"`
}

// call sends one request and classifies what happened: an answer that
// arrived (any status), or an *Error that says whether it may have applied.
// A request whose bytes were not all written is definitely not applied.
func (c *Client) call(ctx context.Context, method, url, op string, attempt *Attempt, body any) (*reply, error) {
	var payload io.Reader
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return nil, &Error{Kind: ErrUnavailable, Op: op, Cause: "encode", Err: err}
		}
		payload = bytes.NewReader(raw)
	}
	opID := ""
	if attempt != nil {
		opID = attempt.operationID
	}
	// What may have reached the service. The transport can return (on a
	// cancellation) before its writer reports, so these are read as "may
	// have been sent" unless the writer said it failed first.
	var gotConn, wroteOK, writeFailed atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wroteOK.Store(true)
			} else {
				writeFailed.Store(true)
			}
		},
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, url, payload)
	if err != nil {
		return nil, &Error{Kind: ErrUnavailable, Op: op, Cause: "request", OperationID: opID, Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if attempt != nil {
		req.Header.Set(ownerTokenHeader, attempt.ownerToken)
		req.Header.Set(operationIDHeader, attempt.operationID)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// Not sent: no connection was had, or the request's bytes were not
		// all written (a partial request cannot be applied).
		sent := gotConn.Load() && (wroteOK.Load() || !writeFailed.Load())
		return nil, transportError(err, sent, op, opID)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		// The answer began and was cut: it was sent.
		return nil, &Error{Kind: ErrIndeterminate, Op: op, Cause: "connection_lost", OperationID: opID, Err: err}
	}
	r := &reply{status: resp.StatusCode, raw: data}
	r.ok = jsonObject(data, &r.body)
	return r, nil
}

// jsonObject decodes data into v when it is one JSON object.
func jsonObject(data []byte, v any) bool {
	trimmed := bytes.TrimSpace(data)
	return len(trimmed) > 0 && trimmed[0] == '{' && json.Unmarshal(trimmed, v) == nil
}

// transportError classifies a failed exchange: nothing sent → unavailable;
// sent (or possibly sent) → indeterminate.
func transportError(err error, sent bool, op, opID string) *Error {
	if !sent {
		cause := "connect"
		var unknownAuthority x509.UnknownAuthorityError
		var hostname x509.HostnameError
		var invalid x509.CertificateInvalidError
		var recordHeader tls.RecordHeaderError
		switch {
		case errors.Is(err, context.Canceled):
			cause = "canceled"
		case errors.As(err, &unknownAuthority), errors.As(err, &hostname), errors.As(err, &invalid),
			errors.As(err, &recordHeader), strings.Contains(err.Error(), "tls:"):
			cause = "tls"
		}
		return &Error{Kind: ErrUnavailable, Op: op, Cause: cause, OperationID: opID, Err: err}
	}
	cause := "connection_lost"
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		cause = "timeout"
	} else if errors.Is(err, context.Canceled) {
		cause = "canceled"
	}
	return &Error{Kind: ErrIndeterminate, Op: op, Cause: cause, OperationID: opID, Err: err}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// unexpected: a reply off the contract is as uncertain as no reply.
func (r *reply) unexpected(op, opID string) *Error {
	return &Error{Kind: ErrIndeterminate, Op: op, Cause: "unexpected_reply", OperationID: opID, Problem: r.problem()}
}

func (r *reply) problem() *Problem {
	if !r.ok {
		return &Problem{Status: r.status}
	}
	b := r.body
	return &Problem{Type: b.Type, Title: b.Title, Status: r.status, Detail: b.Detail, Outcome: b.Outcome, Errors: b.Errors}
}

// failure: the shared failures, a rejection, or an unexpected reply.
func (r *reply) failure(op, opID string) *Error {
	retry := retryAfter(r.body.RetryAfterMs)
	switch r.body.Outcome {
	case "unavailable":
		return &Error{Kind: ErrUnavailable, Op: op, Cause: "service", OperationID: opID, RetryAfter: retry, Problem: r.problem()}
	case "overloaded":
		return &Error{Kind: ErrOverloaded, Op: op, Cause: "service", OperationID: opID, RetryAfter: retry, Problem: r.problem()}
	case "indeterminate", "request_timeout":
		// A request that overran the service's own request timeout may have
		// reached the store: as ambiguous as indeterminate.
		return &Error{Kind: ErrIndeterminate, Op: op, Cause: "service", OperationID: opID, Problem: r.problem()}
	}
	if r.status >= 400 && r.status < 500 {
		return &Error{Kind: ErrRejected, Op: op, Cause: "service", OperationID: opID, Problem: r.problem()}
	}
	return r.unexpected(op, opID)
}

func retryAfter(v *int64) time.Duration {
	if v == nil || *v < 0 {
		return 0
	}
	return millis(*v)
}

// record checks the lease member against the resource asked for.
func (r *reply) record(res Resource, op, opID string) (LeaseRecord, *Error) {
	l := r.body.Lease
	if !r.ok || l == nil || l.Purpose != res.Purpose || l.Digest != res.Digest || l.Guarantee != "fenced" ||
		l.FencingToken <= 0 || l.TTLMs <= 0 || l.RemainingMs < 0 {
		return LeaseRecord{}, r.unexpected(op, opID)
	}
	return *l, nil
}

// inspection decodes an inspect answer (or a watch event's data).
func inspection(data []byte) (Inspection, bool) {
	var in struct {
		Inspection
		Held *bool `json:"held"`
	}
	if err := json.Unmarshal(data, &in); err != nil || in.Held == nil || in.Version == "" {
		return Inspection{}, false
	}
	switch in.HeldBy {
	case "", "caller", "caller_other_operation", "other":
	default:
		return Inspection{}, false
	}
	out := in.Inspection
	out.Held = *in.Held
	return out, true
}
