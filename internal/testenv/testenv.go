// Package testenv decides what a test does when something it needs is missing from the
// machine (Node.js, Chromium, a PostgreSQL server): on a developer's machine it skips,
// saying loudly what was not run and how to run it; under CI (the CI environment
// variable set, as .ci/run runs) it fails, so that a suite never passes by testing
// nothing.
package testenv

import (
	"os"
	"testing"
)

// InCI reports whether the tests run under CI, where a missing prerequisite is a failure.
func InCI() bool { return os.Getenv("CI") != "" }

// Missing ends the test because the named prerequisite is missing: it fails under CI
// and skips elsewhere, in both cases with a message naming the suite, what is missing
// and how to provide it.
func Missing(tb testing.TB, suite, what string) {
	tb.Helper()
	msg := "SKIPPED " + suite + ": " + what
	if InCI() {
		tb.Fatal(msg + " (CI is set: a suite that cannot run fails the run)")
	}
	tb.Skip(msg)
}
