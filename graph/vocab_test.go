package graph_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/vocabtest"
)

// vocabularies are the core's tables by the name of their GraphQL enum.
var vocabularies = map[string][]string{
	"EventKind":   names(awareness.AllEventKinds),
	"ActorType":   names(awareness.AllActorTypes),
	"RunOutcome":  names(awareness.AllRunOutcomes),
	"SessionKind": names(awareness.AllSessionKinds),
}

func names[V ~string](vs []V) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// executableSchema is the schema gqlgen serves.
func executableSchema() *ast.Schema {
	return generated.NewExecutableSchema(generated.Config{}).Schema()
}

// TestVocabulariesMatchTheSchema: every table of the core is its GraphQL enum, value
// for value and in order, both ways (SIG-1, SIG-2, KEY-2); each event kind's
// description states its role; the payload's fields are the input's and the JSON
// scalar's documented keys.
func TestVocabulariesMatchTheSchema(t *testing.T) {
	s := executableSchema()
	for enum, table := range vocabularies {
		def := s.Types[enum]
		if def == nil || def.Kind != ast.Enum {
			t.Errorf("the schema has no enum %s", enum)
			continue
		}
		var values []string
		for _, v := range def.EnumValues {
			values = append(values, v.Name)
		}
		if diff := cmp.Diff(table, values); diff != "" {
			t.Errorf("%s: the core's table (-) and the schema's enum (+) differ:\n%s", enum, diff)
		}
	}
	for _, k := range awareness.AllEventKinds {
		v := s.Types["EventKind"].EnumValues.ForName(string(k))
		if v == nil {
			continue // reported above
		}
		d := v.Description
		for _, c := range []struct {
			role bool
			text string
		}{
			{k.Notifies(), "Notifies watchers."},
			{k.Role() == awareness.LogOnly, "Kept in the log only"},
			{k.SeedsWatchers(), "(WAT-2)"},
			{k.StartsIncarnation(), "(LIF-2)"},
			{k.CountsCompaction(), "(REG-3)"},
			{k.TakesOutcome(), "outcome"},
		} {
			if strings.Contains(d, c.text) != c.role {
				t.Errorf("EventKind %s: the description %q says %q: %v, the table: %v", k, d, c.text, !c.role, c.role)
			}
		}
	}
	input, scalar := s.Types["RecordEventInput"], s.Types["JSON"]
	for _, f := range vocabtest.Fields(t) {
		if input.Fields.ForName(f.JSON) == nil {
			t.Errorf("RecordEventInput has no field %s for awareness.Payload.%s", f.JSON, f.Name)
		}
		if !strings.Contains(scalar.Description, f.JSON) {
			t.Errorf("the JSON scalar's description %q does not name the payload key %s", scalar.Description, f.JSON)
		}
	}
}

// TestVocabulariesRoundTripTheAPI: every value of every table goes in as a variable and
// comes back out as the same value, through gqlgen's enum bindings (gqlgen.yml) and the
// fast path's writer (SIG-1, SIG-2, KEY-2).
func TestVocabulariesRoundTripTheAPI(t *testing.T) {
	e := newEnv(t)
	const session = "agent:main:subagent:vocab"
	const record = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { event { kind actorType payload } } }`
	type view struct {
		Kind      string         `json:"kind"`
		ActorType string         `json:"actorType"`
		Payload   map[string]any `json:"payload"`
	}
	var want []view
	add := func(kind awareness.EventKind, actor awareness.ActorType, outcome awareness.RunOutcome) {
		in := map[string]any{"sessionKey": session, "kind": kind, "actorType": actor}
		v := view{Kind: string(kind), ActorType: string(actor)}
		if outcome != "" {
			in["outcome"] = outcome
			v.Payload = map[string]any{"outcome": string(outcome)}
		}
		if kind == awareness.Deleted {
			// A deletion deletes the session's earlier events (LIF-1): it goes to a
			// session of its own.
			in["sessionKey"] = session + "-deleted"
		}
		var got struct {
			RecordEvent struct{ Event view } `json:"recordEvent"`
		}
		if err := json.Unmarshal(e.mustPost(t, record, map[string]any{"in": in}), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(v, got.RecordEvent.Event); diff != "" {
			t.Errorf("recordEvent's event (-want +got):\n%s", diff)
		}
		if kind != awareness.Deleted {
			want = append(want, v)
		}
	}
	n := max(len(awareness.AllEventKinds), len(awareness.AllActorTypes))
	for i := range n {
		add(awareness.AllEventKinds[i%len(awareness.AllEventKinds)], awareness.AllActorTypes[i%len(awareness.AllActorTypes)], "")
	}
	for _, o := range awareness.AllRunOutcomes {
		add(awareness.RunFailed, awareness.ActorSystem, o)
	}
	var status struct {
		SessionStatus struct {
			StateChanges struct{ Events []view } `json:"stateChanges"`
		} `json:"sessionStatus"`
	}
	q := fmt.Sprintf(`{ sessionStatus(sessionKey: %q, changesSince: 0) { stateChanges { events { kind actorType payload } } } }`, session)
	if err := json.Unmarshal(e.mustPost(t, q, nil), &status); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, status.SessionStatus.StateChanges.Events); diff != "" {
		t.Errorf("sessionStatus's events (-want +got):\n%s", diff)
	}

	// One session of each kind, found by its kind and listed with it.
	keys := map[awareness.SessionKind]string{
		awareness.KindMain: "agent:main:main", awareness.KindSubagent: "agent:main:subagent:s",
		awareness.KindACP: "agent:main:acp:a", awareness.KindDirect: "agent:main:direct:p",
		awareness.KindGroup: "agent:main:discord:group:g", awareness.KindRoom: "agent:main:matrix:room:r",
		awareness.KindChannel: "agent:main:slack:channel:c", awareness.KindCron: "cron:job",
		awareness.KindHook: "hook:h", awareness.KindGlobal: "global", awareness.KindOther: "agent:main:x:y:z",
	}
	for _, k := range awareness.AllSessionKinds {
		key, ok := keys[k]
		if !ok {
			t.Errorf("no sample key of session kind %s: add one", k)
			continue
		}
		if got := awareness.ClassifyKey(key); got != k {
			t.Fatalf("ClassifyKey(%q) = %s, want %s", key, got, k)
		}
		e.record(t, map[string]any{"sessionKey": key, "agentId": "main", "kind": awareness.GoalChanged, "actorType": awareness.ActorSystem})
	}
	for _, k := range awareness.AllSessionKinds {
		var got struct {
			SessionsList struct {
				Sessions []struct{ Kind string } `json:"sessions"`
			} `json:"sessionsList"`
		}
		d := e.mustPost(t, `query($k: SessionKind!) { sessionsList(filter: {kinds: [$k]}) { sessions { kind } } }`, map[string]any{"k": k})
		if err := json.Unmarshal(d, &got); err != nil {
			t.Fatal(err)
		}
		ss := got.SessionsList.Sessions
		if len(ss) == 0 || slices.ContainsFunc(ss, func(s struct{ Kind string }) bool { return s.Kind != string(k) }) {
			t.Errorf("sessionsList(kinds: [%s]) = %s", k, d)
		}
	}
}

// TestPayloadRoundTripsTheAPI_SIG2: every field of awareness.Payload, found by
// reflection, goes in as its RecordEventInput field and comes back in the payload of
// recordEvent's event and of sessionStatus's page (the fast path's writer), through
// every codec on the way: the input mapping, validation, the store's row and the JSON
// scalar.
func TestPayloadRoundTripsTheAPI_SIG2(t *testing.T) {
	e := newEnv(t)
	for i, c := range vocabtest.Cases(t) {
		key := fmt.Sprintf("agent:main:subagent:payload%d", i)
		in := map[string]any{"sessionKey": key, "kind": c.Kind, "actorType": awareness.ActorSystem}
		for k, v := range c.JSON {
			in[k] = v
		}
		var rec struct {
			RecordEvent struct {
				Event struct{ Payload map[string]any } `json:"event"`
			} `json:"recordEvent"`
		}
		d := e.mustPost(t, `mutation($in: RecordEventInput!) { recordEvent(input: $in) { event { payload } } }`, map[string]any{"in": in})
		if err := json.Unmarshal(d, &rec); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.JSON, rec.RecordEvent.Event.Payload); diff != "" {
			t.Errorf("%s: recordEvent's payload (-want +got):\n%s", c.Name, diff)
		}
		var status struct {
			SessionStatus struct {
				StateChanges struct {
					Events []struct{ Payload map[string]any }
				} `json:"stateChanges"`
			} `json:"sessionStatus"`
		}
		q := fmt.Sprintf(`{ sessionStatus(sessionKey: %q, changesSince: 0) { stateChanges { events { payload } } } }`, key)
		if err := json.Unmarshal(e.mustPost(t, q, nil), &status); err != nil {
			t.Fatal(err)
		}
		if evs := status.SessionStatus.StateChanges.Events; len(evs) != 1 {
			t.Errorf("%s: sessionStatus has %d events, want 1", c.Name, len(evs))
		} else if diff := cmp.Diff(c.JSON, evs[0].Payload); diff != "" {
			t.Errorf("%s: sessionStatus's payload (-want +got):\n%s", c.Name, diff)
		}
	}
}

// TestEventKindsQueryIsTheTable_SIG1: the eventKinds query answers the core's event-kind
// table in schema order, each kind with its role and whether it takes an outcome, and
// KindRole is the core's roles both ways; it is what the dashboard and the TypeScript
// client's generated tables read.
func TestEventKindsQueryIsTheTable_SIG1(t *testing.T) {
	roles := map[awareness.KindRole]string{awareness.Notifying: "notifies", awareness.Seeding: "seeds",
		awareness.LogOnly: "logOnly", awareness.Resetting: "resets"}
	var want []string
	for _, r := range awareness.AllKindRoles {
		want = append(want, roles[r])
	}
	var values []string
	for _, v := range executableSchema().Types["KindRole"].EnumValues {
		values = append(values, v.Name)
	}
	if diff := cmp.Diff(want, values); diff != "" {
		t.Errorf("KindRole: the core's roles (-) and the schema's enum (+) differ:\n%s", diff)
	}
	type info struct {
		Kind         string `json:"kind"`
		Role         string `json:"role"`
		TakesOutcome bool   `json:"takesOutcome"`
	}
	var got struct {
		EventKinds []info `json:"eventKinds"`
	}
	e := newEnv(t)
	if err := json.Unmarshal(e.mustPost(t, `{ eventKinds { kind role takesOutcome } }`, nil), &got); err != nil {
		t.Fatal(err)
	}
	var table []info
	for _, k := range awareness.AllEventKinds {
		table = append(table, info{Kind: string(k), Role: roles[k.Role()], TakesOutcome: k.TakesOutcome()})
	}
	if diff := cmp.Diff(table, got.EventKinds); diff != "" {
		t.Errorf("eventKinds: the core's table (-) and the answer (+) differ:\n%s", diff)
	}
}
