package awareness

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

var testNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestEventKinds_SIG1_NTC4(t *testing.T) {
	t.Parallel()
	// The kinds SIG-1 and LIF-1 say notify; every other kind is kept for
	// reconciliation only (NTC-4). Reset does not notify: it closes and reopens by
	// ResetCursor.
	notifying := []EventKind{HumanDirectMessage, UpstreamMissing, GoalChanged, Deleted}
	for _, k := range notifying {
		if !slices.Contains(AllEventKinds, k) {
			t.Errorf("AllEventKinds lacks the notifying kind %q", k)
		}
	}
	for _, k := range AllEventKinds {
		if !k.Valid() {
			t.Errorf("%q.Valid() = false, want true", k)
		}
		if got, want := k.Notifies(), slices.Contains(notifying, k); got != want {
			t.Errorf("%q.Notifies() = %v, want %v", k, got, want)
		}
	}
	for _, k := range []EventKind{"", "spawned", "HUMAN_DIRECT_MESSAGE"} {
		if k.Valid() {
			t.Errorf("%q.Valid() = true, want false", k)
		}
	}
}

// TestValidateRecord_CanonicalSummaries_SIG2 covers every kind × outcome × channel
// combination without a caller-given summary.
func TestValidateRecord_CanonicalSummaries_SIG2(t *testing.T) {
	t.Parallel()
	type combo struct {
		kind    EventKind
		outcome *RunOutcome
		channel *string
	}
	wantSummary := func(c combo) string {
		ch := "unknown"
		if c.channel != nil {
			ch = "telegram"
		}
		switch c.kind {
		case HumanDirectMessage:
			return "human message via " + ch
		case UpstreamMissing:
			return "upstream missing via " + ch
		case GoalChanged:
			return "goal updated"
		case ChildSpawned:
			return "child session spawned"
		case RunCompleted:
			return "child run completed"
		case RunFailed:
			if c.outcome == nil {
				return "child run failed"
			}
			return map[RunOutcome]string{
				OutcomeError:     "child run failed",
				OutcomeTimeout:   "child run timed out",
				OutcomeCancelled: "child run cancelled",
				OutcomeTimedOut:  "child run timed out",
				OutcomeBlocked:   "child run blocked",
				OutcomeLost:      "child run lost",
			}[*c.outcome]
		case Compacted:
			return "session compacted"
		case Created:
			return "session created"
		case Reset:
			return "session reset"
		case Deleted:
			return "session deleted"
		case Adopted:
			return "session adopted via " + ch
		}
		t.Fatalf("no summary for %q", c.kind)
		return ""
	}
	var combos []combo
	for _, k := range AllEventKinds {
		for _, ch := range []*string{nil, ptr("  Telegram ")} {
			outcomes := []*RunOutcome{nil}
			if k == RunFailed {
				outcomes = append(outcomes, ptr(OutcomeError), ptr(OutcomeTimeout), ptr(OutcomeCancelled),
					ptr(OutcomeTimedOut), ptr(OutcomeBlocked), ptr(OutcomeLost)) // LIF-1 widens them
			}
			for _, o := range outcomes {
				combos = append(combos, combo{k, o, ch})
			}
		}
	}
	if got, want := len(combos), len(AllEventKinds)*2+6*2; got != want {
		t.Fatalf("built %d combinations, want %d", got, want)
	}
	for _, c := range combos {
		in := RecordInput{SessionKey: "agent:main:subagent:child", Kind: c.kind, ActorType: ActorSystem, Outcome: c.outcome, Channel: c.channel}
		got, err := ValidateRecord(in, testNow)
		if err != nil {
			t.Errorf("ValidateRecord(%s, outcome %v, channel %v): %v", c.kind, c.outcome, c.channel, err)
			continue
		}
		if want := wantSummary(c); got.Event.Summary != want {
			t.Errorf("summary of %s (outcome %v, channel %v) = %q, want %q", c.kind, deref(c.outcome), deref(c.channel), got.Event.Summary, want)
		}
		var wantPayload Payload
		if c.outcome != nil {
			wantPayload.Outcome = *c.outcome
		}
		if c.channel != nil {
			wantPayload.Channel = "telegram"
		}
		if diff := cmp.Diff(wantPayload, got.Event.Payload); diff != "" {
			t.Errorf("payload of %s mismatch (-want +got):\n%s", c.kind, diff)
		}
		if got, want := got.Event.Summary, CanonicalSummary(c.kind, got.Event.Payload); got != want {
			t.Errorf("summary %q differs from CanonicalSummary %q", got, want)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestValidateRecord_SIG2(t *testing.T) {
	t.Parallel()
	child := SessionRef{"main", "agent:main:subagent:child"}
	base := func() RecordInput {
		return RecordInput{SessionKey: "agent:main:subagent:child", Kind: HumanDirectMessage, ActorType: ActorHuman}
	}
	ev := func(mod func(*Event)) Event {
		e := Event{Session: child, Kind: HumanDirectMessage, ActorType: ActorHuman, Summary: "human message via unknown", OccurredAt: testNow, RecordedAt: testNow}
		if mod != nil {
			mod(&e)
		}
		return e
	}
	tests := []struct {
		name    string
		mod     func(*RecordInput)
		want    NewEvent
		wantErr bool
	}{
		{name: "minimal", mod: func(*RecordInput) {}, want: NewEvent{Event: ev(nil)}},
		{
			name: "full",
			mod: func(in *RecordInput) {
				in.Kind = RunFailed
				in.ActorType = ActorSystem
				in.RunID = ptr("  run-1 ")
				in.Outcome = ptr(OutcomeCancelled)
				in.DedupeKey = ptr("run-terminal:run-1")
				in.Watchers = []string{"agent:main:main"}
			},
			want: NewEvent{Event: ev(func(e *Event) {
				e.Kind, e.ActorType, e.RunID, e.DedupeKey = RunFailed, ActorSystem, "run-1", "run-terminal:run-1"
				e.Summary, e.Payload = "child run cancelled", Payload{Outcome: OutcomeCancelled}
			}), Watchers: []SessionRef{{"main", "agent:main:main"}}},
		},
		{name: "agentId of a canonical key agrees", mod: func(in *RecordInput) { in.AgentID = ptr("main") }, want: NewEvent{Event: ev(nil)}},
		{name: "agentId contradicts the key", mod: func(in *RecordInput) { in.AgentID = ptr("ops") }, wantErr: true},
		{name: "bare key takes the agent", mod: func(in *RecordInput) { in.SessionKey, in.AgentID = "Global", ptr("ops") }, want: NewEvent{Event: ev(func(e *Event) {
			e.Session = SessionRef{"ops", "global"}
		}), SessionKind: KindGlobal}},
		{name: "malformed key", mod: func(in *RecordInput) { in.SessionKey = "agent:main:" }, wantErr: true},
		{name: "unknown kind", mod: func(in *RecordInput) { in.Kind = "spawned" }, wantErr: true},
		{name: "empty kind", mod: func(in *RecordInput) { in.Kind = "" }, wantErr: true},
		{name: "unknown actor type", mod: func(in *RecordInput) { in.ActorType = "robot" }, wantErr: true},
		{name: "empty actor type", mod: func(in *RecordInput) { in.ActorType = "" }, wantErr: true},

		// actorId
		{name: "human actor id kept as given", mod: func(in *RecordInput) { in.ActorID = ptr(" U123Abc ") }, want: NewEvent{Event: ev(func(e *Event) { e.ActorID = "U123Abc" })}},
		{name: "agent actor id canonicalised", mod: func(in *RecordInput) {
			in.ActorType, in.ActorID = ActorAgent, ptr(" Agent:Main::Main ")
		}, want: NewEvent{Event: ev(func(e *Event) { e.ActorType, e.ActorID = ActorAgent, "agent:main:main" }), Actor: SessionRef{"main", "agent:main:main"}}},
		{name: "empty actor id", mod: func(in *RecordInput) { in.ActorID = ptr("  ") }, wantErr: true},
		{name: "actor id with newline", mod: func(in *RecordInput) { in.ActorID = ptr("a\nb") }, wantErr: true},
		{name: "actor id too long", mod: func(in *RecordInput) { in.ActorID = ptr(strings.Repeat("a", MaxActorIDBytes+1)) }, wantErr: true},
		{name: "agent actor id too long once lowercased", mod: func(in *RecordInput) {
			in.ActorID = ptr("agent:main:" + strings.Repeat("\u023a", 250))
		}, wantErr: true},

		// runId, dedupeKey
		{name: "empty run id", mod: func(in *RecordInput) { in.RunID = ptr(" ") }, wantErr: true},
		{name: "run id too long", mod: func(in *RecordInput) { in.RunID = ptr(strings.Repeat("r", MaxRunIDBytes+1)) }, wantErr: true},
		{name: "empty dedupe key", mod: func(in *RecordInput) { in.DedupeKey = ptr("") }, wantErr: true},
		{name: "dedupe key with control", mod: func(in *RecordInput) { in.DedupeKey = ptr("a\x01") }, wantErr: true},
		{name: "dedupe key too long", mod: func(in *RecordInput) { in.DedupeKey = ptr(strings.Repeat("d", MaxDedupeKeyBytes+1)) }, wantErr: true},

		// payload whitelist
		{name: "outcome on human message", mod: func(in *RecordInput) { in.Outcome = ptr(OutcomeError) }, wantErr: true},
		{name: "unknown outcome", mod: func(in *RecordInput) { in.Kind, in.Outcome = RunFailed, ptr(RunOutcome("boom")) }, wantErr: true},
		{name: "empty channel", mod: func(in *RecordInput) { in.Channel = ptr("  ") }, wantErr: true},
		{name: "channel too long", mod: func(in *RecordInput) { in.Channel = ptr(strings.Repeat("c", MaxChannelBytes+1)) }, wantErr: true},
		{name: "channel with line separator", mod: func(in *RecordInput) { in.Channel = ptr("tele\u2028gram") }, wantErr: true},
		{name: "channel with newline", mod: func(in *RecordInput) { in.Channel = ptr("tele\ngram") }, wantErr: true},
		{name: "turns 0", mod: func(in *RecordInput) { in.Turns = ptr(0) }, wantErr: true},
		{name: "turns -1", mod: func(in *RecordInput) { in.Turns = ptr(-1) }, wantErr: true},
		{name: "turns 1", mod: func(in *RecordInput) { in.Turns = ptr(1) }, want: NewEvent{Event: ev(func(e *Event) { e.Payload.Turns = 1 })}},
		{name: "turns 3 via claude", mod: func(in *RecordInput) { in.Turns, in.Channel = ptr(3), ptr("claude") }, want: NewEvent{Event: ev(func(e *Event) {
			e.Payload, e.Summary = Payload{Channel: "claude", Turns: 3}, "human message via claude"
		})}},

		// summary
		{name: "given summary trimmed", mod: func(in *RecordInput) { in.Kind, in.Summary = GoalChanged, ptr("  goal created ") }, want: NewEvent{Event: ev(func(e *Event) {
			e.Kind, e.Summary = GoalChanged, "goal created"
		})}},
		{name: "summary of 200 runes", mod: func(in *RecordInput) { in.Summary = ptr(strings.Repeat("é", 200)) }, want: NewEvent{Event: ev(func(e *Event) {
			e.Summary = strings.Repeat("é", 200)
		})}},
		{name: "summary of 201 runes", mod: func(in *RecordInput) { in.Summary = ptr(strings.Repeat("é", 201)) }, wantErr: true},
		{name: "blank summary", mod: func(in *RecordInput) { in.Summary = ptr(" \t ") }, wantErr: true},
		{name: "two-line summary", mod: func(in *RecordInput) { in.Summary = ptr("a\nb") }, wantErr: true},
		{name: "CR summary", mod: func(in *RecordInput) { in.Summary = ptr("a\rb") }, wantErr: true},
		{name: "U+2028 summary", mod: func(in *RecordInput) { in.Summary = ptr("a\u2028b") }, wantErr: true},
		{name: "U+2029 summary", mod: func(in *RecordInput) { in.Summary = ptr("a\u2029b") }, wantErr: true},
		{name: "NEL summary", mod: func(in *RecordInput) { in.Summary = ptr("a\u0085b") }, wantErr: true},
		{name: "tab summary", mod: func(in *RecordInput) { in.Summary = ptr("a\tb") }, wantErr: true},
		{name: "invalid UTF-8 summary", mod: func(in *RecordInput) { in.Summary = ptr("a\xffb") }, wantErr: true},

		// watchers (WAT-2, WAT-4, KEY-3)
		{name: "watchers canonicalised and deduplicated in order", mod: func(in *RecordInput) {
			in.Watchers = []string{"AGENT:Main:Main", "agent:ops:work", " agent:main:main ", "agent:main::main"}
		}, want: NewEvent{Event: ev(nil), Watchers: []SessionRef{{"main", "agent:main:main"}, {"ops", "agent:ops:work"}}}},
		// WAT-4: watchers that cannot watch are skipped and reported, the event stays valid.
		{name: "WAT-4 bare watcher skipped", mod: func(in *RecordInput) { in.Watchers = []string{"global"} }, want: NewEvent{Event: ev(nil),
			Skipped: []SkippedWatcher{{"global", `watcher "global" is not an agent-qualified session key (agent:<agentId>:<rest>); bare keys cannot watch`}}}},
		{name: "WAT-4 cron watcher skipped", mod: func(in *RecordInput) { in.Watchers = []string{"cron:job"} }, want: NewEvent{Event: ev(nil),
			Skipped: []SkippedWatcher{{"cron:job", `watcher "cron:job" is not an agent-qualified session key (agent:<agentId>:<rest>); bare keys cannot watch`}}}},
		{name: "WAT-4 malformed watcher skipped", mod: func(in *RecordInput) { in.Watchers = []string{"agent:bad/id:main"} }, want: NewEvent{Event: ev(nil),
			Skipped: []SkippedWatcher{{"agent:bad/id:main", `watcher "agent:bad/id:main" has an invalid agent id`}}}},
		{name: "WAT-4 self watcher skipped", mod: func(in *RecordInput) { in.Watchers = []string{"Agent:Main:SubAgent:Child"} }, want: NewEvent{Event: ev(nil),
			Skipped: []SkippedWatcher{{"Agent:Main:SubAgent:Child", "the watcher is the session itself; a session cannot watch itself"}}}},
		{name: "WAT-4 valid, bare, self and malformed mixed", mod: func(in *RecordInput) {
			in.Watchers = []string{"agent:main:main", "global", "agent:main:subagent:child", "agent:main:", "agent:ops:main", "a\x00b"}
		}, want: NewEvent{Event: ev(nil), Watchers: []SessionRef{{"main", "agent:main:main"}, {"ops", "agent:ops:main"}}, Skipped: []SkippedWatcher{
			{"global", `watcher "global" is not an agent-qualified session key (agent:<agentId>:<rest>); bare keys cannot watch`},
			{"agent:main:subagent:child", "the watcher is the session itself; a session cannot watch itself"},
			{"agent:main:", `watcher "agent:main:" is not an agent-qualified session key (agent:<agentId>:<rest>); bare keys cannot watch`},
			{"a\x00b", "watcher contains a control character or line break"},
		}}},
		{name: "32 watchers", mod: func(in *RecordInput) { in.Watchers = nWatchers(MaxWatchersPerEvent) }, want: NewEvent{Event: ev(nil), Watchers: watcherRefs(nWatchers(MaxWatchersPerEvent))}},
		{name: "33 watchers", mod: func(in *RecordInput) { in.Watchers = nWatchers(MaxWatchersPerEvent + 1) }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			tt.mod(&in)
			got, err := ValidateRecord(in, testNow)
			if tt.wantErr {
				wantInvalid(t, err)
				return
			}
			if err != nil {
				t.Fatalf("ValidateRecord: %v", err)
			}
			if tt.want.SessionKind == "" {
				tt.want.SessionKind = KindSubagent // the session of base()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ValidateRecord mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// watcherRefs are the references of canonical watcher keys of agent main.
func watcherRefs(keys []string) []SessionRef {
	refs := make([]SessionRef, len(keys))
	for i, k := range keys {
		refs[i] = SessionRef{AgentID: "main", Key: k}
	}
	return refs
}

func nWatchers(n int) []string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = "agent:main:subagent:w" + strings.Repeat("x", i)
	}
	return ws
}

func TestClampOccurredAt_SIG5(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CEST", 2*3600)
	tests := []struct {
		name string
		in   *time.Time
		want time.Time
	}{
		{"missing", nil, testNow},
		{"zero", ptr(time.Time{}), testNow},
		{"now", ptr(testNow), testNow},
		{"one hour ago", ptr(testNow.Add(-time.Hour)), testNow.Add(-time.Hour)},
		{"exactly 24h ago", ptr(testNow.Add(-24 * time.Hour)), testNow.Add(-24 * time.Hour)},
		{"25h ago", ptr(testNow.Add(-25 * time.Hour)), testNow.Add(-24 * time.Hour)},
		{"year 1970", ptr(time.Unix(0, 0)), testNow.Add(-24 * time.Hour)},
		{"one ns in the future", ptr(testNow.Add(time.Nanosecond)), testNow},
		{"a year in the future", ptr(testNow.AddDate(1, 0, 0)), testNow},
		{"other zone", ptr(testNow.Add(-time.Minute).In(paris)), testNow.Add(-time.Minute)},
	}
	for _, tt := range tests {
		got := ClampOccurredAt(tt.in, testNow)
		if !got.Equal(tt.want) || got.Location() != time.UTC {
			t.Errorf("%s: ClampOccurredAt = %v, want %v (UTC)", tt.name, got, tt.want)
		}
		// Through ValidateRecord, too; bookkeeping time stays the service clock.
		ne, err := ValidateRecord(RecordInput{SessionKey: "global", Kind: Compacted, ActorType: ActorSystem, OccurredAt: tt.in}, testNow)
		if err != nil {
			t.Fatalf("%s: ValidateRecord: %v", tt.name, err)
		}
		if got := ne.Event.OccurredAt; !got.Equal(tt.want) {
			t.Errorf("%s: OccurredAt = %v, want %v", tt.name, got, tt.want)
		}
		if got := ne.Event.RecordedAt; !got.Equal(testNow) {
			t.Errorf("%s: RecordedAt = %v, want the service clock %v", tt.name, got, testNow)
		}
	}
}

func TestPayloadMap_SIG2(t *testing.T) {
	t.Parallel()
	if got := (Payload{}).Map(); got != nil {
		t.Errorf("empty payload Map() = %v, want nil", got)
	}
	got := Payload{Outcome: OutcomeTimeout, Channel: "acp", Turns: 2}.Map()
	want := map[string]any{"outcome": "timeout", "channel": "acp", "turns": 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Map() mismatch (-want +got):\n%s", diff)
	}
}

// FuzzValidateRecord checks that validation never panics and that everything it accepts
// respects SIG-2 and SIG-5.
func FuzzValidateRecord(f *testing.F) {
	f.Add("agent:main:subagent:c", "", false, "human_direct_message", "human", "U1", true, "", false, int64(0), "", "telegram", true, 0, "agent:main:main")
	f.Add("global", "ops", true, "run_failed", "system", "", false, "", false, int64(-90000), "timeout", "", false, 2, "")
	f.Add("cron:job", "", false, "adopted", "agent", "Agent:Main:Main", true, "x\u2028y", true, int64(3600), "", "a\u2028b", true, 1, "global")
	f.Add("agent:main:main", "", false, "goal_changed", "human", "", false, strings.Repeat("é", 201), true, int64(-1), "error", "C", true, -5, "agent:main:main")
	f.Fuzz(func(t *testing.T, key, agent string, hasAgent bool, kind, actorType, actorID string, hasActor bool,
		summary string, hasSummary bool, offsetSec int64, outcome, channel string, hasChannel bool, turns int, watcher string) {
		in := RecordInput{SessionKey: key, Kind: EventKind(kind), ActorType: ActorType(actorType)}
		if hasAgent {
			in.AgentID = &agent
		}
		if hasActor {
			in.ActorID = &actorID
		}
		if hasSummary {
			in.Summary = &summary
		}
		if offsetSec != 0 {
			at := testNow.Add(time.Duration(offsetSec%(1<<33)) * time.Second)
			in.OccurredAt = &at
		}
		if outcome != "" {
			o := RunOutcome(outcome)
			in.Outcome = &o
		}
		if hasChannel {
			in.Channel = &channel
		}
		if turns != 0 {
			in.Turns = &turns
		}
		if watcher != "" {
			in.Watchers = []string{watcher, watcher}
		}
		ne, err := ValidateRecord(in, testNow)
		if err != nil {
			if ErrorCode(err) != EINVALID || ErrorMessage(err) == "" {
				t.Fatalf("error %v: want INVALID_ARGUMENT with a message", err)
			}
			return
		}
		e := ne.Event
		checkResolved(t, key, e.Session)
		if !e.Kind.Valid() || !e.ActorType.Valid() {
			t.Fatalf("accepted kind %q / actor type %q", e.Kind, e.ActorType)
		}
		checkOneLine(t, "summary", e.Summary)
		if n := utf8.RuneCountInString(e.Summary); n == 0 || n > MaxSummaryRunes {
			t.Fatalf("summary %q has %d runes", e.Summary, n)
		}
		if e.Payload.Outcome != "" && (!e.Payload.Outcome.Valid() || e.Kind != RunFailed) {
			t.Fatalf("outcome %q on %s", e.Payload.Outcome, e.Kind)
		}
		if c := e.Payload.Channel; c != "" {
			checkOneLine(t, "channel", c)
			if len(c) > MaxChannelBytes || c != strings.ToLower(strings.TrimSpace(c)) {
				t.Fatalf("channel %q is not canonical", c)
			}
		}
		if e.Payload.Turns < 0 || turns >= 1 && e.Payload.Turns != turns {
			t.Fatalf("turns = %d from input %d", e.Payload.Turns, turns)
		}
		for k := range e.Payload.Map() {
			if k != "outcome" && k != "channel" && k != "turns" {
				t.Fatalf("payload key %q is not whitelisted", k)
			}
		}
		if e.OccurredAt.Before(testNow.Add(-MaxClockSkew)) || e.OccurredAt.After(testNow) || e.OccurredAt.Location() != time.UTC {
			t.Fatalf("occurredAt %v outside [now-24h, now] UTC", e.OccurredAt)
		}
		if !e.RecordedAt.Equal(testNow) {
			t.Fatalf("recordedAt %v, want %v", e.RecordedAt, testNow)
		}
		if e.ActorID != "" {
			checkOneLine(t, "actorId", e.ActorID)
			if p, ok := ParseSessionKey(e.ActorID); ok && p.String() != e.ActorID {
				t.Fatalf("agent actorId %q is not canonical", e.ActorID)
			}
		}
		if len(ne.Watchers) > 1 {
			t.Fatalf("watchers %q not deduplicated", ne.Watchers)
		}
		for _, w := range ne.Watchers {
			ref, err := ResolveWatcher(w.Key)
			if err != nil || ref != w {
				t.Fatalf("watcher %+v is not canonical: %+v, %v", w, ref, err)
			}
			if w == e.Session {
				t.Fatalf("watcher %+v watches itself", w)
			}
		}
		if ne.SessionKind != ClassifyKey(e.Session.Key) {
			t.Fatalf("session kind %q, want %q", ne.SessionKind, ClassifyKey(e.Session.Key))
		}
		if p, ok := ParseSessionKey(e.ActorID); ok != (ne.Actor != SessionRef{}) || ok && (ne.Actor != SessionRef{AgentID: p.AgentID, Key: e.ActorID}) {
			t.Fatalf("actor %+v of actorId %q", ne.Actor, e.ActorID)
		}
	})
}

func checkOneLine(t *testing.T, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("%s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			t.Fatalf("%s %q contains %U", what, s, r)
		}
	}
}
