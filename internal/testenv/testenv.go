// Package testenv decides what a test does when something it needs is missing from the
// machine (Node.js, Chromium, a PostgreSQL server): on a developer's machine it skips,
// saying loudly what was not run and how to run it; under CI (the CI environment
// variable set, as .ci/run runs) it fails, so that a suite never passes by testing
// nothing.
//
// go test shows a passing package's output only with -v, so a skip alone would go
// unseen in `go test ./...`. Every package whose tests can skip this way runs them
// through Main (or wraps its testing.M with M), which, after the tests, writes one
// SKIPPED line per skipped suite to the go command's own standard error (or, failing
// that, the terminal), and keeps such a run out of go test's cache, so that the next
// `go test ./...` runs the package again and says it again instead of "(cached)".
package testenv

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// InCI reports whether the tests run under CI, where a missing prerequisite is a failure.
func InCI() bool { return os.Getenv("CI") != "" }

// skipped counts the tests that Missing skipped, by message.
var skipped struct {
	sync.Mutex
	n map[string]int
}

// Missing ends the test because the named prerequisite is missing: it fails under CI
// and skips elsewhere, in both cases with a message naming the suite, what is missing
// and how to provide it.
func Missing(tb testing.TB, suite, what string) {
	tb.Helper()
	msg := "SKIPPED " + suite + ": " + what
	if InCI() {
		tb.Fatal(msg + " (CI is set: a suite that cannot run fails the run)")
	}
	skipped.Lock()
	if skipped.n == nil {
		skipped.n = map[string]int{}
	}
	skipped.n[msg]++
	skipped.Unlock()
	uncacheable()
	tb.Skip(msg)
}

// Main runs the package's tests, reports the suites Missing skipped (see the package
// doc) and exits.
func Main(m *testing.M) { os.Exit(M(m).Run()) }

// TestingM is what a TestMain runs: *testing.M, or a wrapper of it such as M's
// (goleak.VerifyTestMain takes one).
type TestingM interface{ Run() int }

// M returns m whose Run also reports the suites Missing skipped.
func M(m TestingM) TestingM { return reporting{m} }

type reporting struct{ m TestingM }

func (r reporting) Run() int {
	code := r.m.Run()
	report()
	return code
}

// report writes the SKIPPED lines, also where go test shows them without -v.
func report() {
	skipped.Lock()
	defer skipped.Unlock()
	if len(skipped.n) == 0 {
		return
	}
	var b strings.Builder
	for _, msg := range slices.Sorted(maps.Keys(skipped.n)) {
		pkg, _ := packageDir()
		fmt.Fprintf(&b, "%s: %s (%d %s)\n", pkg, msg, skipped.n[msg], plural(skipped.n[msg], "test", "tests"))
	}
	fmt.Fprint(os.Stderr, b.String())
	if !testing.Verbose() {
		if w := goCommandStderr(); w != nil {
			_, _ = io.WriteString(w, b.String())
			w.Close()
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// packageDir is the package's directory relative to its module's root, as go test
// names it ("./e2e"; the test runs in the package's directory), and the root.
func packageDir() (rel, root string) {
	wd, err := os.Getwd()
	if err != nil {
		return "?", ""
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return ".", dir
			}
			return "./" + filepath.ToSlash(rel), dir
		}
		if filepath.Dir(dir) == dir {
			return wd, ""
		}
	}
}

// goCommandStderr opens the standard error of the go command that runs this test
// binary (Linux: /proc/<parent>/fd/2), else the terminal; nil when neither is there.
// go test hands the binary a pipe it discards for a passing package without -v.
func goCommandStderr() io.WriteCloser {
	if runtime.GOOS == "linux" {
		parent := strconv.Itoa(os.Getppid())
		if exe, err := os.Readlink("/proc/" + parent + "/exe"); err == nil && strings.TrimSuffix(filepath.Base(exe), ".exe") == "go" {
			if f, err := os.OpenFile("/proc/"+parent+"/fd/2", os.O_WRONLY|os.O_APPEND, 0); err == nil {
				return f
			}
		}
	}
	if f, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		return f
	}
	return nil
}

// uncacheable makes go test not cache this run: it refuses to cache a run whose tests
// opened a file of the module modified within the last seconds (cmd/go's
// modTimeCutoff), so this writes one (.testenv/, ignored by git) and opens it. It
// must run inside a test: go test sees the opens made while m.Run runs.
func uncacheable() {
	pkg, root := packageDir()
	if root == "" {
		return
	}
	dir := filepath.Join(root, ".testenv")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	path := filepath.Join(dir, strings.NewReplacer("/", "_", ".", "root").Replace(strings.TrimPrefix(pkg, "./"))+".skipped")
	if err := os.WriteFile(path, []byte("a suite of "+pkg+" was skipped: go test does not cache the run\n"), 0o600); err != nil {
		return
	}
	if f, err := os.Open(path); err == nil {
		f.Close()
	}
}
