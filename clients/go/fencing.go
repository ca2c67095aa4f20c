package leasehold

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Fencing at the resource (DESIGN §16): a fencing token protects only what
// checks it. For PostgreSQL, CheckFencingToken records the highest token seen
// per resource inside the caller's transaction and refuses an older one with
// ErrStaleFencingToken. Create the table once (FenceTableDDL), then guard
// every write of the protected work in the same transaction:
//
//	tx, _ := db.BeginTx(ctx, nil)
//	if err := leasehold.CheckFencingToken(ctx, tx, "invoice-export/customer-42", lease.FencingToken()); err != nil {
//		tx.Rollback() // errors.Is(err, leasehold.ErrStaleFencingToken): stop the work
//		return err
//	}
//	tx.ExecContext(ctx, "UPDATE invoices SET ... WHERE customer = $1", 42)
//	tx.Commit()
//
// The guard is one statement:
//
//	INSERT INTO leasehold_fence (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
//	    WHERE leasehold_fence.token <= EXCLUDED.token
//	RETURNING token
//
// A row comes back when this token is the highest seen (or equal: the same
// holder writing again); none when a newer holder has written, and then the
// transaction must not go on. The row stays locked until the transaction
// ends, so an older holder's transaction and a newer one's are serialised on
// it. Other stores: keep the token beside the data and make every write a
// compare-and-set (UPDATE … SET value = ?, fence = ? WHERE id = ? AND fence <= ?,
// then check that one row changed).
const FenceTableDDL = `CREATE TABLE IF NOT EXISTS leasehold_fence (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
)`

// ErrStaleFencingToken: a newer holder has written to the resource.
var ErrStaleFencingToken = errors.New("leasehold: stale fencing token")

// StaleFencingTokenError: Token is older than Current, which a newer holder
// wrote with. Roll the transaction back and stop the work; this holder's
// lease is gone.
type StaleFencingTokenError struct {
	Resource string
	Token    int64
	Current  int64
}

func (e *StaleFencingTokenError) Error() string {
	return fmt.Sprintf("leasehold: stale fencing token %d for %q: a newer holder wrote with %d", e.Token, e.Resource, e.Current)
}

// Is matches ErrStaleFencingToken.
func (e *StaleFencingTokenError) Is(target error) bool { return target == ErrStaleFencingToken }

// Querier is what the guard needs: *sql.Tx (the usual), *sql.Conn or *sql.DB.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$`)

// FenceSQL is the guard statement for table (parameters $1 resource, $2 token).
func FenceSQL(table string) (string, error) {
	if !tableName.MatchString(table) {
		return "", fmt.Errorf("leasehold: table %q must be a plain (optionally schema-qualified) name", table)
	}
	short := table[strings.LastIndex(table, ".")+1:]
	return "INSERT INTO " + table + " (resource, token) VALUES ($1, $2) " +
		"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now() " +
		"WHERE " + short + ".token <= EXCLUDED.token RETURNING token", nil
}

// CheckFencingToken records token as the highest seen for resource in the
// table leasehold_fence, inside the caller's open transaction q, or returns a
// *StaleFencingTokenError when a newer token has been recorded. Commit or
// roll back as usual: the record and the protected writes land together or
// not at all.
func CheckFencingToken(ctx context.Context, q Querier, resource string, token int64) error {
	return CheckFencingTokenIn(ctx, q, "leasehold_fence", resource, token)
}

// CheckFencingTokenIn is CheckFencingToken with another table.
func CheckFencingTokenIn(ctx context.Context, q Querier, table, resource string, token int64) error {
	if resource == "" {
		return fmt.Errorf("leasehold: resource must not be empty")
	}
	if token <= 0 {
		return fmt.Errorf("leasehold: token must be a positive fencing token")
	}
	stmt, err := FenceSQL(table)
	if err != nil {
		return err
	}
	var stored int64
	err = q.QueryRowContext(ctx, stmt, resource, token).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		var current int64
		if err := q.QueryRowContext(ctx, "SELECT token FROM "+table+" WHERE resource = $1", resource).Scan(&current); err != nil {
			return fmt.Errorf("leasehold: reading the stored fencing token: %w", err)
		}
		return &StaleFencingTokenError{Resource: resource, Token: token, Current: current}
	}
	return err
}
