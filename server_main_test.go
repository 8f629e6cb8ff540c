package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/awareness/awareness/internal/models/pgtest"
)

// mainConfig is a valid serve configuration on the database db and a free port, with
// the demo on so that every step of Open has something to start.
func mainConfig(t *testing.T, db string) serveConfig {
	t.Helper()
	args := []string{"--addr", "127.0.0.1:0", "--db", db, "--prune-interval", "1h", "--demo", "--demo-pace", "1h"}
	cfg, err := parseServeConfig(args, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var errInjected = errors.New("injected failure")

// A failure at any step of Open closes exactly the steps opened before it, in reverse
// order, and leaves nothing running; without a failure Close closes every step in
// reverse. On PostgreSQL the listener step starts a listener too.
func TestMainOpenFailureClosesWhatWasOpenedInReverse(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testOpenFailures(t, filepath.Join(t.TempDir(), "a.db")) })
	t.Run("postgres", func(t *testing.T) { testOpenFailures(t, pgtest.NewDatabase(t)) })
}

func testOpenFailures(t *testing.T, db string) {
	names := func(steps []step) (out []string) {
		for _, s := range steps {
			out = append(out, s.name)
		}
		return out
	}(newMain(serveConfig{}, io.Discard).steps())
	for fail := 0; fail <= len(names); fail++ {
		name := "no failure"
		if fail < len(names) {
			name = "fail at " + names[fail]
		}
		t.Run(name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var log syncBuffer
			m := newMain(mainConfig(t, db), &log)
			closed := []string{}
			steps := m.steps()
			for i := range steps {
				s := steps[i]
				if i == fail {
					steps[i].open = func(context.Context) (func(), error) { return nil, errInjected }
					continue
				}
				steps[i].open = func(ctx context.Context) (func(), error) {
					c, err := s.open(ctx)
					if err != nil {
						return nil, err
					}
					return func() {
						closed = append(closed, s.name)
						if c != nil {
							c()
						}
					}, nil
				}
			}
			err := m.open(t.Context(), steps)
			if fail < len(names) {
				if !errors.Is(err, errInjected) || !strings.HasPrefix(err.Error(), names[fail]+": ") {
					t.Fatalf("Open = %v, want the injected failure of step %s", err, names[fail])
				}
			} else {
				if err != nil {
					t.Fatalf("Open: %v\n%s", err, log.String())
				}
				m.Close()
			}
			want := slices.Clone(names[:min(fail, len(names))])
			slices.Reverse(want)
			if diff := cmp.Diff(want, closed); diff != "" {
				t.Errorf("steps closed (-want +got):\n%s", diff)
			}
			// What was opened is closed for real: the database, the port.
			if m.store != nil {
				if err := m.store.Ping(context.Background()); err == nil {
					t.Error("the database still answers after Open failed or Close")
				}
			}
			if m.ln != nil {
				ln, err := net.Listen("tcp", m.ln.Addr().String())
				if err != nil {
					t.Errorf("the port is still bound: %v", err)
				} else {
					ln.Close()
				}
			}
			// Calling Close again closes nothing twice.
			m.Close()
			if len(closed) != len(want) {
				t.Errorf("a second Close closed %q again", closed[len(want):])
			}
		})
	}
}

// Real failures, through run: each exits 1 and its log shows exactly the steps
// opened before it closing, in reverse order.
func TestServeFailingToStartClosesWhatItOpened(t *testing.T) {
	shutdownSteps := []string{"shutdown: WebSocket connections closed", "shutdown: http server stopped",
		"shutdown: pruner stopped", "shutdown: upstream monitor stopped", "shutdown: notice hub closed",
		"shutdown: database closed", "shutdown: database lock released", "shutdown complete"}
	tests := []struct {
		name string
		// setup returns the arguments of serve, and what to do after they are parsed.
		setup  func(t *testing.T, dir string) (args []string, afterParse func())
		failed string   // the message logged by the failing step
		closed []string // shutdownSteps that must appear, in this order
		// untouched: the database file was never created (nothing migrated or swept).
		untouched bool
	}{
		{
			name: "unopenable database",
			setup: func(t *testing.T, dir string) ([]string, func()) {
				db := filepath.Join(dir, "a.db")
				if err := os.WriteFile(db, []byte("not a database, not even close to one: "+strings.Repeat("x", 200)), 0o600); err != nil {
					t.Fatal(err)
				}
				return []string{"--db", db, "--addr", "127.0.0.1:0"}, nil
			},
			failed: `msg="open database"`,
			closed: []string{"shutdown: database lock released"},
		},
		{
			name: "catalog gone",
			setup: func(t *testing.T, dir string) ([]string, func()) {
				cat := filepath.Join(dir, "transcripts")
				if err := os.Mkdir(cat, 0o700); err != nil {
					t.Fatal(err)
				}
				// parseServeConfig checks the directory; it goes away before Open.
				return []string{"--db", filepath.Join(dir, "a.db"), "--addr", "127.0.0.1:0", "--catalog", "claude=" + cat}, func() {
					if err := os.Remove(cat); err != nil {
						t.Fatal(err)
					}
				}
			},
			failed: `msg="open catalog"`,
			closed: []string{"shutdown: notice hub closed", "shutdown: database closed", "shutdown: database lock released"},
		},
		{
			name: "address in use",
			setup: func(t *testing.T, dir string) ([]string, func()) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				return []string{"--db", filepath.Join(dir, "a.db"), "--addr", ln.Addr().String()}, nil
			},
			// The port is bound before anything else: the database was never touched.
			failed:    "msg=listen",
			untouched: true,
		},
		{
			name: "database served by another process",
			setup: func(t *testing.T, dir string) ([]string, func()) {
				db := filepath.Join(dir, "a.db")
				holdLock(t, db, lockHolder{PID: 4242, Addr: "127.0.0.1:9999", State: lockServing})
				return []string{"--db", db, "--addr", "127.0.0.1:0"}, nil
			},
			failed:    "is served by pid 4242 on 127.0.0.1:9999",
			untouched: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			dir := t.TempDir()
			args, afterParse := tt.setup(t, dir)
			cfg, err := parseServeConfig(args, func(string) (string, bool) { return "", false }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if afterParse != nil {
				afterParse()
			}
			var log syncBuffer
			if code := serve(t.Context(), cfg, &log); code != exitError {
				t.Fatalf("serve = %d, want %d; log:\n%s", code, exitError, log.String())
			}
			out := log.String()
			if _, err := os.Stat(filepath.Join(dir, "a.db")); tt.untouched && err == nil {
				t.Errorf("the database was created although the start failed before it:\n%s", out)
			}
			if !strings.Contains(out, tt.failed) {
				t.Errorf("log lacks the failure %s:\n%s", tt.failed, out)
			}
			at := -1
			for _, step := range shutdownSteps {
				i := strings.Index(out, step)
				switch {
				case slices.Contains(tt.closed, step) && i < 0:
					t.Errorf("log lacks %q:\n%s", step, out)
				case slices.Contains(tt.closed, step) && i < at:
					t.Errorf("%q is logged out of order:\n%s", step, out)
				case !slices.Contains(tt.closed, step) && i >= 0:
					t.Errorf("log has %q, of a step that was never opened:\n%s", step, out)
				}
				at = max(at, i)
			}
		})
	}
}
