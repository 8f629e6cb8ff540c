package awareness

import (
	"context"
	"errors"
)

// A GraphQL request with several mutation fields is checked as a whole before its
// first field writes: the transport runs every field once under WithCheckOnly, and
// each Service write stops after its input checks and authorization, the very code it
// runs before writing, with ErrCheckOnly instead of writing. A refusal then refuses
// the whole request with nothing written.

type checkOnlyKey struct{}

// WithCheckOnly returns a context under which the Service's writes check their input
// and the caller's authorization and then return ErrCheckOnly, writing nothing. Reads
// answer as always.
func WithCheckOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, checkOnlyKey{}, true)
}

// CheckOnly reports whether ctx is a WithCheckOnly context. The stores refuse to
// write under one, so a write that forgot its gate fails instead of writing twice.
func CheckOnly(ctx context.Context) bool {
	v, _ := ctx.Value(checkOnlyKey{}).(bool)
	return v
}

// ErrCheckOnly is what a Service write returns under WithCheckOnly once its checks
// passed: nothing was written.
var ErrCheckOnly = errors.New("checked only: the checks passed and nothing was written")

// writing is the gate of every Service write, passed after its checks and before its
// first store write: ErrCheckOnly under WithCheckOnly, else nil.
func writing(ctx context.Context) error {
	if CheckOnly(ctx) {
		return ErrCheckOnly
	}
	return nil
}

// errCheckOnlyWrite is what a store answers to a write under WithCheckOnly: a write
// without its gate, a bug.
var errCheckOnlyWrite = Internal(errors.New("a store write under WithCheckOnly: a Service write lacks its gate"))

// RefuseCheckOnly returns an INTERNAL error when ctx is a WithCheckOnly context: every
// store calls it before a write transaction.
func RefuseCheckOnly(ctx context.Context) error {
	if CheckOnly(ctx) {
		return errCheckOnlyWrite
	}
	return nil
}
