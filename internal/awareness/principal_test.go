package awareness_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

func ptr[T any](v T) *T { return &v }

// Every Service method checks the caller's principal after resolving its keys: an
// agent principal acts on its own agent's sessions only; unfiltered streams and
// listings are admin-only (listings are narrowed instead); a refused call writes
// nothing (ERR-2). No principal (no auth file) allows everything.
func TestAuthorizeAgentPrincipal_ERR1_ERR2(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	st, err := models.OpenSQLite(bg, filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := awareness.NewService(awareness.Config{Store: st})
	t.Cleanup(func() {
		svc.Hub().Close()
		st.Close()
	})
	// Seed as the service itself (no principal): one session of each agent.
	for _, k := range []string{"agent:ops:main", "agent:main:subagent:x"} {
		if _, err := svc.RecordEvent(bg, awareness.RecordInput{SessionKey: k, Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent}); err != nil {
			t.Fatal(err)
		}
	}
	ops := awareness.WithPrincipal(bg, awareness.Principal{AgentID: "ops", Name: "gw"})
	admin := awareness.WithPrincipal(bg, awareness.Principal{Admin: true})
	sessions := `{"agent:main:imported":{"sessionId":"s1","updatedAt":1767225600000}}`
	opsSessions := `{"agent:ops:imported":{"sessionId":"s1","updatedAt":1767225600000}}`

	calls := []struct {
		name      string
		call      func(ctx context.Context) error
		forbidden bool // for the ops principal
	}{
		{"record own", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:main", Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent})
			return err
		}, false},
		{"record other agent", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:main:subagent:x", Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent})
			return err
		}, true},
		{"record bare key of another agent", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "global", Kind: awareness.Compacted, ActorType: awareness.ActorSystem})
			return err
		}, true},
		{"record with another agent's watcher", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:subagent:c", Kind: awareness.ChildSpawned, ActorType: awareness.ActorAgent, Watchers: []string{"agent:main:main"}})
			return err
		}, true},
		{"status own", func(ctx context.Context) error {
			_, err := svc.SessionStatus(ctx, "agent:ops:main", nil, ptr(int64(0)), nil)
			return err
		}, false},
		{"status other", func(ctx context.Context) error {
			_, err := svc.SessionStatus(ctx, "agent:main:subagent:x", nil, nil, nil)
			return err
		}, true},
		{"list other agent", func(ctx context.Context) error {
			_, err := svc.SessionsList(ctx, awareness.SessionFilter{AgentID: ptr("main")}, 10, nil)
			return err
		}, true},
		{"watch as own", func(ctx context.Context) error {
			_, err := svc.Watch(ctx, "agent:ops:main", "agent:main:subagent:x", nil)
			return err
		}, false},
		{"watch as other", func(ctx context.Context) error {
			_, err := svc.Watch(ctx, "agent:main:main", "agent:ops:main", nil)
			return err
		}, true},
		{"unwatch as other", func(ctx context.Context) error {
			_, err := svc.Unwatch(ctx, "agent:main:main", "agent:ops:main", nil)
			return err
		}, true},
		{"ack as other", func(ctx context.Context) error {
			_, err := svc.AckNotices(ctx, "agent:main:main", nil, nil, nil)
			return err
		}, true},
		{"pending as other", func(ctx context.Context) error {
			_, err := svc.PendingNotices(ctx, "agent:main:main")
			return err
		}, true},
		{"pending own", func(ctx context.Context) error {
			_, err := svc.PendingNotices(ctx, "agent:ops:main")
			return err
		}, false},
		{"every cursor", func(ctx context.Context) error {
			_, err := svc.Watches(ctx, nil, nil, nil)
			return err
		}, true},
		{"cursors on another agent's target", func(ctx context.Context) error {
			_, err := svc.Watches(ctx, nil, ptr("agent:main:subagent:x"), nil)
			return err
		}, true},
		{"reset other", func(ctx context.Context) error {
			_, err := svc.ResetSession(ctx, "agent:main:main", nil)
			return err
		}, true},
		{"delete other", func(ctx context.Context) error {
			_, err := svc.DeleteSession(ctx, "agent:main:subagent:x", nil)
			return err
		}, true},
		{"notices of every watcher", func(ctx context.Context) error {
			_, _, err := svc.SubscribeNotices(ctx, nil, false)
			return err
		}, true},
		{"notices of another watcher", func(ctx context.Context) error {
			_, _, err := svc.SubscribeNotices(ctx, ptr("agent:main:main"), false)
			return err
		}, true},
		{"events of every session", func(ctx context.Context) error {
			_, _, err := svc.SubscribeEvents(ctx, nil, nil)
			return err
		}, true},
		{"events of another agent's session", func(ctx context.Context) error {
			_, _, err := svc.SubscribeEvents(ctx, ptr("agent:main:subagent:x"), nil)
			return err
		}, true},
		{"import for another agent", func(ctx context.Context) error {
			_, err := svc.ImportSessions(ctx, "main", []byte(sessions))
			return err
		}, true},
		{"import own", func(ctx context.Context) error {
			_, err := svc.ImportSessions(ctx, "ops", []byte(opsSessions))
			return err
		}, false},
		{"upsert other", func(ctx context.Context) error {
			_, err := svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: "agent:main:main"})
			return err
		}, true},
		{"memory flush other", func(ctx context.Context) error {
			_, err := svc.RecordMemoryFlush(ctx, "agent:main:main", nil)
			return err
		}, true},
		{"compaction policy other", func(ctx context.Context) error {
			_, err := svc.CompactionPolicy(ctx, awareness.CompactionQuery{SessionKey: "agent:main:main", ContextWindow: 1000})
			return err
		}, true},
		{"upstream links of another agent", func(ctx context.Context) error {
			_, err := svc.UpstreamLinks(ctx, ptr("main"))
			return err
		}, true},
		{"own prompt for another agent", func(ctx context.Context) error {
			_, err := svc.RecordOwnPrompt(ctx, "agent:main:main", nil, "hello")
			return err
		}, true},
	}
	for _, c := range calls {
		if !c.forbidden {
			continue
		}
		before, err := st.Stats(bg)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ops)
		err = c.call(cctx)
		cancel()
		if got := awareness.ErrorCode(err); got != awareness.EFORBIDDEN {
			t.Errorf("%s as agent:ops = %v, want FORBIDDEN", c.name, err)
		}
		after, err := st.Stats(bg)
		if err != nil {
			t.Fatal(err)
		}
		if before.Sessions != after.Sessions || before.Events != after.Events || before.Cursors != after.Cursors || before.PendingNotices != after.PendingNotices {
			t.Errorf("%s: a refused call wrote: stats %+v → %+v", c.name, before, after)
		}
	}
	for _, c := range calls {
		for _, who := range []struct {
			name string
			ctx  context.Context
			only bool // only calls allowed for ops
		}{{"agent:ops", ops, true}, {"admin", admin, false}, {"no principal", bg, false}} {
			if who.only && c.forbidden {
				continue
			}
			cctx, cancel := context.WithCancel(who.ctx)
			err := c.call(cctx)
			cancel()
			if code := awareness.ErrorCode(err); code == awareness.EFORBIDDEN || code == awareness.EUNAUTHENTICATED {
				t.Errorf("%s as %s = %v, want allowed", c.name, who.name, err)
			}
		}
	}

	// Listings without an agent filter are narrowed to the principal's agent.
	page, err := svc.SessionsList(ops, awareness.SessionFilter{}, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Sessions) == 0 {
		t.Fatal("ops sees no session of its own")
	}
	for _, s := range page.Sessions {
		if s.Ref.AgentID != "ops" {
			t.Errorf("agent:ops lists %+v", s.Ref)
		}
	}
	all, err := svc.SessionsList(admin, awareness.SessionFilter{}, 100, nil)
	if err != nil || len(all.Sessions) <= len(page.Sessions) {
		t.Errorf("admin lists %d sessions (err %v), ops %d", len(all.Sessions), err, len(page.Sessions))
	}
}
