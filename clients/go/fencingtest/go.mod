// A test-only module: the fencing guard against a real PostgreSQL through
// Debian's lib/pq (apt-get install golang-github-lib-pq-dev), so that the
// client's own go.mod requires nothing. Build with GOPROXY=off GOFLAGS=-mod=mod.
module github.com/leasehold/leasehold/clients/go/fencingtest

go 1.19

require (
	github.com/leasehold/leasehold/clients/go v0.0.0
	github.com/lib/pq v1.10.7
)

replace github.com/leasehold/leasehold/clients/go => ../

replace github.com/lib/pq => /usr/share/gocode/src/github.com/lib/pq
