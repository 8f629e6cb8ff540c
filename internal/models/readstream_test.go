package models

import (
	"context"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// unpackRow reads what changesPackedSQL writes and refuses anything else (the page is
// then read column by column).
func TestUnpackRow(t *testing.T) {
	r, payload := unpackTest(t, "7;1796211050021381474;12:goal_changed5:human-7:a:b;c:d-11:{\"turns\":3}")
	if r.Sequence != 7 || !r.OccurredAt.Equal(time.Unix(0, 1796211050021381474)) || string(r.Kind) != "goal_changed" ||
		string(r.ActorType) != "human" || r.ActorID != nil || string(r.Summary) != "a:b;c:d" || r.RunID != nil ||
		string(payload) != `{"turns":3}` {
		t.Errorf("got %+v payload %q", r, payload)
	}
	for _, b := range []string{
		"",
		"7;1;12:goal_changed5:human---",       // a text missing
		"7;1;12:goal_changed5:human-----x",    // bytes after the last
		"7;1;13:goal_changed5:human-----",     // a length past the end
		"x;1;12:goal_changed5:human-----",     // not a number
		"7;12:goal_changed5:human-----",       // an integer missing
		"99999999999999999999;1;1:a1:b-1:c--", // out of range
		"7;1;12:goal_changed5:human--1:ab-",   // a length that cuts a text
	} {
		var r awareness.PageRow
		var p []byte
		if unpackRow([]byte(b), &r, &p) {
			t.Errorf("unpackRow(%q) = true, want false", b)
		}
	}
}

func unpackTest(t *testing.T, b string) (awareness.PageRow, []byte) {
	t.Helper()
	var (
		r       awareness.PageRow
		payload []byte
	)
	if !unpackRow([]byte(b), &r, &payload) {
		t.Fatalf("unpackRow(%q) = false", b)
	}
	return r, payload
}

// collectSink builds the events of a streamed page back from its rows; refuseAt > 0
// refuses that row (1-based).
type collectSink struct {
	events   []awareness.Event
	refuseAt int
}

func (c *collectSink) Row(ref awareness.SessionRef, r *awareness.PageRow) bool {
	if len(c.events)+1 == c.refuseAt {
		return false
	}
	c.events = append(c.events, awareness.Event{Session: ref, Sequence: r.Sequence, Kind: awareness.EventKind(r.Kind),
		ActorType: awareness.ActorType(r.ActorType), ActorID: string(r.ActorID), Summary: string(r.Summary),
		OccurredAt: r.OccurredAt, RunID: string(r.RunID),
		// The payload's strings are views of the row: copy them.
		Payload: awareness.Payload{Outcome: awareness.RunOutcome(string([]byte(r.Payload.Outcome))),
			Channel: string([]byte(r.Payload.Channel)), Turns: r.Payload.Turns}})
	return true
}

// REC-1: ReadStatusTo reads what ReadStatus reads, on both databases: the head, the
// session, More, and the page's events handed to the sink (those of ReadStatus
// without what a page's answer does not show: dedupe key, recording time); a sink that
// refuses a row gets the page in Changes.Events instead.
func TestReadStatusToMatchesReadStatus(t *testing.T) {
	for name, open := range map[string]func(testing.TB) *Store{"sqlite": MustOpenSQLite, "postgres": func(tb testing.TB) *Store {
		pgtest.AdminURL(tb)
		return MustOpenPostgres(tb)
	}} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			svc := awareness.NewService(awareness.Config{Store: store})
			str := func(s string) *string { return &s }
			num := func(n int) *int { return &n }
			outcome := awareness.OutcomeTimeout
			const key = "agent:main:subagent:streamto"
			for _, in := range []awareness.RecordInput{
				{Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, ActorID: str("+15550100"), Channel: str("telegram"), Turns: num(3)},
				{Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman, Summary: str("é漢字🙂 \"q\" \\ 12:ab;- a summary with the packing's own marks")},
				{Kind: awareness.RunFailed, ActorType: awareness.ActorAgent, RunID: str("run-8"), Outcome: &outcome, DedupeKey: str("d1")},
				{Kind: awareness.Compacted, ActorType: awareness.ActorSystem},
				{Kind: awareness.Adopted, ActorType: awareness.ActorHuman, ActorID: str("-"), Summary: str("-")},
			} {
				in.SessionKey = key
				if _, err := svc.RecordEvent(ctx, in); err != nil {
					t.Fatalf("record %s: %v", in.Kind, err)
				}
			}
			ref := awareness.SessionRef{AgentID: "main", Key: key}
			for _, c := range []struct {
				ref          awareness.SessionRef
				after        int64
				limit        int
				refuseAt     int
				wantStreamed bool
			}{
				{ref, 0, 500, 0, true}, {ref, 2, 2, 0, true}, {ref, 5, 10, 0, true}, {ref, 0, 0, 0, true},
				{ref, 0, 500, 3, false},
				{awareness.SessionRef{AgentID: "main", Key: "agent:main:subagent:none"}, 0, 10, 0, false},
			} {
				want, wantSess, err := store.ReadStatus(ctx, c.ref, c.after, c.limit)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want.Events {
					want.Events[i].DedupeKey, want.Events[i].RecordedAt = "", time.Time{}
				}
				sink := &collectSink{refuseAt: c.refuseAt}
				got, gotSess, streamed, count, last, err := store.ReadStatusTo(ctx, c.ref, c.after, c.limit, sink)
				if err != nil {
					t.Fatal(err)
				}
				if streamed != c.wantStreamed {
					t.Fatalf("%+v: streamed %v, want %v", c, streamed, c.wantStreamed)
				}
				events := got.Events
				if streamed {
					events = sink.events
					if got.Events != nil {
						t.Errorf("%+v: streamed, with %d events in Changes.Events", c, len(got.Events))
					}
					wantLast := int64(0)
					if n := len(want.Events); n > 0 {
						wantLast = want.Events[n-1].Sequence
					}
					if count != len(want.Events) || last != wantLast {
						t.Errorf("%+v: count %d last %d, want %d %d", c, count, last, len(want.Events), wantLast)
					}
				} else {
					for i := range events {
						events[i].DedupeKey, events[i].RecordedAt = "", time.Time{}
					}
				}
				if got.Head != want.Head || got.More != want.More || got.Earliest != want.Earliest {
					t.Errorf("%+v: got head %+v more %v earliest %d, want %+v %v %d", c, got.Head, got.More, got.Earliest, want.Head, want.More, want.Earliest)
				}
				if (gotSess == nil) != (wantSess == nil) {
					t.Errorf("%+v: session %v, want %v", c, gotSess, wantSess)
				}
				if len(events) != len(want.Events) {
					t.Fatalf("%+v: %d events, want %d", c, len(events), len(want.Events))
				}
				for i := range events {
					if g, w := events[i], want.Events[i]; g.Session != w.Session || g.Sequence != w.Sequence || g.Kind != w.Kind ||
						g.ActorType != w.ActorType || g.ActorID != w.ActorID || g.Summary != w.Summary ||
						!g.OccurredAt.Equal(w.OccurredAt) || g.RunID != w.RunID || g.Payload != w.Payload {
						t.Errorf("%+v: event %d\n got %+v\nwant %+v", c, i, g, w)
					}
				}
			}
		})
	}
}
