package demo_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/demo"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/syncbuf"
)

func newService(t *testing.T, path string) *awareness.Service {
	t.Helper()
	store, err := models.OpenSQLite(t.Context(), path, models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	hub := awareness.NewHub()
	t.Cleanup(hub.Close)
	return awareness.NewService(awareness.Config{Store: store, Hub: hub})
}

// lockedBuffer collects a child process's or logger's output (see syncbuf).
type lockedBuffer = syncbuf.Buffer

// start runs the demo in a goroutine and returns a func that cancels it and checks
// that Run returned nil promptly.
func start(t *testing.T, svc *awareness.Service, log *slog.Logger, pace time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- demo.Run(ctx, svc, log, pace) }()
	return func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after cancel = %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5s of cancel")
		}
	}
}

func version(t *testing.T, svc *awareness.Service, key string) int64 {
	t.Helper()
	st, err := svc.SessionStatus(t.Context(), key, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st.StateVersion
}

// waitSeeded waits until the last seed event is in the coder's log.
func waitSeeded(t *testing.T, svc *awareness.Service) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for version(t, svc, demo.Coder) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the scene was not seeded within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunSeedsTheScene: the manager watches three sub-agents it spawned, a person's
// Telegram message notified it (wake) and the nested research watcher (no wake), a
// goal change on the reviewer notified the manager, and the reviewer's run timed out.
func TestRunSeedsTheScene(t *testing.T) {
	svc := newService(t, filepath.Join(t.TempDir(), "demo.db"))
	stop := start(t, svc, nil, time.Hour) // no step of the running scene
	waitSeeded(t, svc)
	stop()

	ctx := t.Context()
	pending, err := svc.PendingNotices(ctx, demo.Manager)
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, n := range pending {
		targets[n.Target.Key] = true
		if !n.Wake {
			t.Errorf("manager notice on %s has wake=false, want true", n.Target.Key)
		}
	}
	if len(pending) != 2 || !targets[demo.Coder] || !targets[demo.Reviewer] {
		t.Errorf("manager's pending notices = %v, want one on %s and one on %s", targets, demo.Coder, demo.Reviewer)
	}
	rp, err := svc.PendingNotices(ctx, demo.Research)
	if err != nil {
		t.Fatal(err)
	}
	if len(rp) != 1 || rp[0].Target.Key != demo.Coder || rp[0].Wake {
		t.Errorf("research's pending notices = %+v, want one on %s with wake=false", rp, demo.Coder)
	}

	cursors, err := svc.Watches(ctx, new(demo.Manager), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cursors) != 3 {
		t.Errorf("manager watches %d sessions, want 3 (the spawned children)", len(cursors))
	}

	zero := int64(0)
	st, err := svc.SessionStatus(ctx, demo.Reviewer, nil, &zero, nil)
	if err != nil {
		t.Fatal(err)
	}
	var timedOut bool
	for _, e := range st.Changes.Events {
		if e.Kind == awareness.RunFailed && e.Payload.Outcome == awareness.OutcomeTimeout {
			timedOut = true
		}
	}
	if !timedOut {
		t.Errorf("reviewer log has no run_failed with outcome timeout: %+v", st.Changes.Events)
	}
	st, err = svc.SessionStatus(ctx, demo.Coder, nil, &zero, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := st.Changes.Events[1]; e.Kind != awareness.HumanDirectMessage || e.Payload.Channel != "telegram" || e.ActorType != awareness.ActorHuman {
		t.Errorf("coder event 2 = %+v, want a human_direct_message via telegram", e)
	}
}

// TestRunSeedIsIdempotent: running the demo again on the same database adds nothing
// to the seeded logs (dedupe keys, SIG-4).
func TestRunSeedIsIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.db")
	svc := newService(t, path)
	stop := start(t, svc, nil, time.Hour)
	waitSeeded(t, svc)
	stop()
	want := map[string]int64{}
	for _, k := range []string{demo.Manager, demo.Research, demo.Coder, demo.Reviewer} {
		want[k] = version(t, svc, k)
	}

	stop = start(t, svc, nil, time.Hour)
	time.Sleep(200 * time.Millisecond)
	stop()
	for k, v := range want {
		if got := version(t, svc, k); got != v {
			t.Errorf("%s version after a second run = %d, want %d", k, got, v)
		}
	}
}

// TestRunKeepsGoingAndStops: the running scene records steps without failing until
// its context ends, and its helper spawns stay bounded.
func TestRunKeepsGoingAndStops(t *testing.T) {
	svc := newService(t, filepath.Join(t.TempDir(), "demo.db"))
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	stop := start(t, svc, log, 2*time.Millisecond)
	deadline := time.Now().Add(20 * time.Second)
	for version(t, svc, demo.Coder) < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("the running scene made too little progress; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if strings.Contains(logs.String(), "demo step failed") {
		t.Errorf("a step failed:\n%s", logs.String())
	}
	page, err := svc.SessionsList(t.Context(), awareness.SessionFilter{KeyPrefix: new("agent:main:subagent:helper-")}, 50, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page.Sessions); n == 0 || n > 3 {
		t.Errorf("helper sub-agents = %d, want 1..3", n)
	}
}

func TestRunNilService(t *testing.T) {
	if err := demo.Run(t.Context(), nil, nil, 0); err == nil {
		t.Error("Run with a nil service succeeded")
	}
}
