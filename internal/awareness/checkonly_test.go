package awareness_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// checkWrites are every write of the Service, each called once (ERR-2): under
// WithCheckOnly a valid call returns ErrCheckOnly and writes nothing, a call its own
// checks refuse returns that refusal, and without it the call writes.
func checkWrites(svc *awareness.Service) []struct {
	name         string
	valid, wrong func(ctx context.Context) error
} {
	main, child, adopted := "agent:main:main", "agent:main:subagent:c", "agent:main:adopted"
	human := awareness.RecordInput{SessionKey: child, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}
	bad := awareness.RecordInput{SessionKey: "agent:main:", Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}
	drop := func(_ any, err error) error { return err }
	return []struct {
		name         string
		valid, wrong func(ctx context.Context) error
	}{
		{"RecordEvent",
			func(ctx context.Context) error { return drop(svc.RecordEvent(ctx, human)) },
			func(ctx context.Context) error { return drop(svc.RecordEvent(ctx, bad)) }},
		{"RecordBatch",
			func(ctx context.Context) error {
				return drop(svc.RecordBatch(ctx, []awareness.RecordInput{human, bad}))
			},
			func(ctx context.Context) error {
				return drop(svc.RecordBatch(ctx, make([]awareness.RecordInput, awareness.MaxRecordBatch+1)))
			}},
		{"RecordEvents",
			func(ctx context.Context) error { return drop(svc.RecordEvents(ctx, []awareness.RecordInput{human})) },
			func(ctx context.Context) error {
				return drop(svc.RecordEvents(ctx, []awareness.RecordInput{human, bad}))
			}},
		{"Watch",
			func(ctx context.Context) error { return drop(svc.Watch(ctx, "agent:main:subagent:w", child, nil)) },
			func(ctx context.Context) error { return drop(svc.Watch(ctx, main, "agent:main:", nil)) }},
		{"AcknowledgeNotices",
			func(ctx context.Context) error {
				return drop(svc.AcknowledgeNotices(ctx, main, []awareness.NoticeRef{{Target: child, NotifiedVersion: 1}}))
			},
			func(ctx context.Context) error {
				return drop(svc.AcknowledgeNotices(ctx, main, []awareness.NoticeRef{{Target: child, NotifiedVersion: 0}}))
			}},
		{"AckNotices",
			func(ctx context.Context) error { return drop(svc.AckNotices(ctx, main, nil, nil, nil)) },
			func(ctx context.Context) error { return drop(svc.AckNotices(ctx, "global", nil, nil, nil)) }},
		{"Unwatch",
			func(ctx context.Context) error { return drop(svc.Unwatch(ctx, main, child, nil)) },
			func(ctx context.Context) error { return drop(svc.Unwatch(ctx, "global", child, nil)) }},
		{"ResetSession",
			func(ctx context.Context) error { return drop(svc.ResetSession(ctx, "agent:main:subagent:w", nil)) },
			func(ctx context.Context) error { return drop(svc.ResetSession(ctx, "agent:main:", nil)) }},
		{"DeleteSession",
			func(ctx context.Context) error { return drop(svc.DeleteSession(ctx, child, nil)) },
			func(ctx context.Context) error { return drop(svc.DeleteSession(ctx, "agent:main:", nil)) }},
		{"UpsertSession",
			func(ctx context.Context) error {
				return drop(svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: "agent:main:new"}))
			},
			func(ctx context.Context) error {
				return drop(svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: "agent:main:\x00"}))
			}},
		{"ImportSessions",
			func(ctx context.Context) error {
				return drop(svc.ImportSessions(ctx, "main", []byte(`{"agent:main:imported":{"sessionId":"s","updatedAt":1767225600000}}`)))
			},
			func(ctx context.Context) error { return drop(svc.ImportSessions(ctx, "main", []byte(`{`))) }},
		{"RecordMemoryFlush",
			func(ctx context.Context) error { return drop(svc.RecordMemoryFlush(ctx, main, nil)) },
			func(ctx context.Context) error { return drop(svc.RecordMemoryFlush(ctx, "agent:main:", nil)) }},
		{"AdoptSession",
			func(ctx context.Context) error {
				return drop(svc.AdoptSession(ctx, "agent:main:adopted2", nil, "cat", "t2"))
			},
			func(ctx context.Context) error { return drop(svc.AdoptSession(ctx, adopted, nil, "nocat", "t1")) }},
		{"RecordOwnPrompt",
			func(ctx context.Context) error { return drop(svc.RecordOwnPrompt(ctx, adopted, nil, "hello")) },
			func(ctx context.Context) error { return drop(svc.RecordOwnPrompt(ctx, "agent:main:", nil, "hello")) }},
	}
}

// snapshot is everything a memStore holds that a write could change.
func snapshotOf(t *testing.T, st awareness.Store) any {
	t.Helper()
	ctx := context.Background()
	stats, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	curs, err := st.Cursors(ctx, awareness.CursorQuery{})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := st.ListSessions(ctx, awareness.SessionQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	links, err := st.(awareness.UpstreamStore).UpstreamLinks(ctx, awareness.UpstreamQuery{})
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := st.(awareness.UpstreamStore).OwnPrompts(ctx, awareness.SessionRef{AgentID: "main", Key: "agent:main:adopted"})
	if err != nil {
		t.Fatal(err)
	}
	return []any{stats, curs, sessions, links, prompts}
}

// TestCheckOnlyWritesNothing_ERR2: every Service write under WithCheckOnly runs its own
// checks (a refused call answers its refusal) and then writes nothing (ErrCheckOnly);
// the same call without it writes. This is what lets graph.MutationChecks check a
// request's mutation fields before the first one writes.
func TestCheckOnlyWritesNothing_ERR2(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	svc := awareness.NewService(awareness.Config{Store: st, Catalogs: []awareness.Catalog{stubCatalog{"cat"}}})
	t.Cleanup(func() { svc.Hub().Close(); _ = st.Close() })
	ctx := context.Background()
	// A registered main session watching a child with a pending notice, an adopted
	// session.
	if _, err := svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: "agent:main:main"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Watch(ctx, "agent:main:main", "agent:main:subagent:c", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:main:subagent:c", Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AdoptSession(ctx, "agent:main:adopted", nil, "cat", "t1"); err != nil {
		t.Fatal(err)
	}
	check := awareness.WithCheckOnly(ctx)
	for _, w := range checkWrites(svc) {
		before := snapshotOf(t, st)
		if err := w.valid(check); !errors.Is(err, awareness.ErrCheckOnly) {
			t.Errorf("%s under WithCheckOnly: %v, want ErrCheckOnly", w.name, err)
		}
		if err := w.wrong(check); err == nil || errors.Is(err, awareness.ErrCheckOnly) {
			t.Errorf("%s refused by its checks, under WithCheckOnly: %v, want its refusal", w.name, err)
		}
		if diff := cmp.Diff(before, snapshotOf(t, st)); diff != "" {
			t.Errorf("%s under WithCheckOnly wrote (-before +after):\n%s", w.name, diff)
		}
	}
	// Without it, each writes (the snapshot moves), in an order where each still can.
	for _, w := range checkWrites(svc) {
		before := snapshotOf(t, st)
		if err := w.valid(ctx); err != nil {
			t.Errorf("%s: %v", w.name, err)
		}
		if cmp.Equal(before, snapshotOf(t, st)) {
			t.Errorf("%s wrote nothing", w.name)
		}
	}
	// The store refuses a write under WithCheckOnly: a write without its gate fails
	// instead of writing twice.
	now := time.Now()
	ne, err := awareness.ValidateRecord(awareness.RecordInput{SessionKey: "agent:main:subagent:c", Kind: awareness.GoalChanged,
		ActorType: awareness.ActorHuman}, now)
	if err != nil {
		t.Fatal(err)
	}
	before := snapshotOf(t, st)
	if err := st.Append(check, []*awareness.AppendOp{awareness.NewAppendOp(ne, now)}); awareness.ErrorCode(err) != awareness.EINTERNAL {
		t.Errorf("Store.Append under WithCheckOnly: %v, want INTERNAL", err)
	}
	if _, err := st.Ack(check, awareness.AckRequest{Watcher: "agent:main:main", Now: now}); awareness.ErrorCode(err) != awareness.EINTERNAL {
		t.Errorf("Store.Ack under WithCheckOnly: %v, want INTERNAL", err)
	}
	if diff := cmp.Diff(before, snapshotOf(t, st)); diff != "" {
		t.Errorf("a store write under WithCheckOnly wrote (-before +after):\n%s", diff)
	}
}
