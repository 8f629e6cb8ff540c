package client

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// LIF-2 through the Go client against the service: notices carry both generations,
// and AcknowledgeNotices names the watcher's, so the notices drained before the
// watcher's reset are refused with CodeStaleGeneration (a permanent refusal) and the
// new incarnation's notice stays pending until its own acknowledgement.
func TestAcknowledgeNotices_StaleGeneration_LIF2(t *testing.T) {
	ctx := context.Background()
	store, err := models.OpenSQLite(ctx, filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := awareness.NewService(awareness.Config{Store: store})
	srv := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc}))
	t.Cleanup(func() {
		srv.Close()
		svc.Hub().Close()
		store.Close()
	})
	c, err := New(srv.URL + "/query")
	if err != nil {
		t.Fatal(err)
	}
	const watcher, target = "agent:main:main", "agent:main:subagent:life"
	human := func() {
		t.Helper()
		if _, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: target, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WatchTarget(ctx, watcher, Target{SessionKey: target}); err != nil {
		t.Fatal(err)
	}
	human()
	old, err := c.PendingNotices(ctx, watcher)
	if err != nil || len(old) != 1 || old[0].WatcherGeneration != 1 || old[0].TargetGeneration != 1 {
		t.Fatalf("first notice: %+v %v, want one with generations 1 and 1", old, err)
	}
	if _, err := svc.ResetSession(ctx, watcher, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WatchTarget(ctx, watcher, Target{SessionKey: target}); err != nil {
		t.Fatal(err)
	}
	human()
	old[0].NotifiedVersion = 2 // even naming the new notice's version: the generation is the old one
	_, err = c.AcknowledgeNotices(ctx, watcher, old)
	if e, ok := errors.AsType[*Error](err); !ok || e.Code != CodeStaleGeneration || !Permanent(err) {
		t.Fatalf("acknowledging the previous generation's notice: %v, want a permanent %s", err, CodeStaleGeneration)
	}
	fresh, err := c.PendingNotices(ctx, watcher)
	if err != nil || len(fresh) != 1 || fresh[0].WatcherGeneration != 2 || fresh[0].NotifiedVersion != 2 {
		t.Fatalf("the new incarnation's notice: %+v %v, want it pending at N 2, watcher generation 2", fresh, err)
	}
	acks, err := c.AcknowledgeNotices(ctx, watcher, fresh)
	if err != nil || len(acks) != 1 || acks[0].Outcome != AckAcknowledged {
		t.Fatalf("acknowledging the current notice: %+v %v", acks, err)
	}
}
