// fencing-example runs the fencing example against a leasehold service and a
// PostgreSQL database:
//
//	go run ./cmd/fencing-example http://127.0.0.1:8080 "host=/tmp port=5432 user=postgres dbname=postgres sslmode=disable"
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/leasehold/leasehold/clients/go/fencingtest"
	_ "github.com/lib/pq"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: fencing-example LEASEHOLD_URL POSTGRES_DSN")
		os.Exit(2)
	}
	db, err := sql.Open("postgres", os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer db.Close()
	stale, err := fencingtest.RunExample(context.Background(), os.Stdout, os.Args[1], db)
	if err != nil || stale == nil {
		fmt.Fprintln(os.Stderr, "example failed:", err)
		os.Exit(1)
	}
}
