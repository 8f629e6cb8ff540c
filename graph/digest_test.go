package graph_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const digestFields = `digest { byKind { kind count } byActorType { actorType count } humanEvents lastHumanChannel latestVersion counted pruned }`

// DIG-1: pendingNotices, acknowledgeNotices' follow-up and the staleNotices
// subscription over WebSocket carry the digest of (L, N], byte for byte the same on
// every path; the text stays NTC-1's.
func TestNoticeDigestOnEveryPath_DIG1(t *testing.T) {
	e := newEnv(t)
	const w = "agent:main:main"
	e.record(t, map[string]any{"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{w}}) // 1: L = N = 1
	e.record(t, map[string]any{"sessionKey": child, "kind": "compacted", "actorType": "system"})                                                // 2
	e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "channel": "telegram"})               // 3: opens (1, 3]
	e.record(t, map[string]any{"sessionKey": child, "kind": "goal_changed", "actorType": "agent", "actorId": "agent:main:subagent:other"})      // 4: M = 4

	const want3 = `{"changesSince":1,"notifiedVersion":3,"text":"Session \"agent:main:subagent:child\" changed (other actor). Reconcile before acting: session_status sessionKey \"agent:main:subagent:child\" changesSince 1.",` +
		`"digest":{"byKind":[{"kind":"human_direct_message","count":1},{"kind":"compacted","count":1}],"byActorType":[{"actorType":"human","count":1},{"actorType":"system","count":1}],` +
		`"humanEvents":1,"lastHumanChannel":"telegram","latestVersion":3,"counted":2,"pruned":0}}`
	var d struct {
		PendingNotices []json.RawMessage `json:"pendingNotices"`
	}
	decode(t, e.mustPost(t, `query($w: String!) { pendingNotices(watcher: $w) { changesSince notifiedVersion text `+digestFields+` } }`, map[string]any{"w": w}), &d)
	if len(d.PendingNotices) != 1 || string(d.PendingNotices[0]) != want3 {
		t.Fatalf("pendingNotices:\n got %s\nwant [%s]", d.PendingNotices, want3)
	}

	ws := e.dialWS(t, "graphql-transport-ws")
	ws.subscribe("n", `subscription { staleNotices(watcher: "agent:main:main") { changesSince notifiedVersion text `+digestFields+` } }`)
	var s struct {
		StaleNotices json.RawMessage `json:"staleNotices"`
	}
	decode(t, ws.nextData(), &s)
	if string(s.StaleNotices) != want3 {
		t.Fatalf("staleNotices:\n got %s\nwant %s", s.StaleNotices, want3)
	}

	// The exact acknowledgement's follow-up (3, 4] has its own digest.
	var a struct {
		AcknowledgeNotices []struct {
			Outcome  string          `json:"outcome"`
			FollowUp json.RawMessage `json:"followUp"`
		} `json:"acknowledgeNotices"`
	}
	decode(t, e.mustPost(t, `mutation { acknowledgeNotices(watcher: "agent:main:main", notices: [{target: "agent:main:subagent:child", notifiedVersion: 3}]) {
  outcome followUp { changesSince notifiedVersion text `+digestFields+` } } }`, nil), &a)
	const want4 = `{"changesSince":3,"notifiedVersion":4,"text":"Session \"agent:main:subagent:child\" changed (other actor). Reconcile before acting: session_status sessionKey \"agent:main:subagent:child\" changesSince 3.",` +
		`"digest":{"byKind":[{"kind":"goal_changed","count":1}],"byActorType":[{"actorType":"agent","count":1}],` +
		`"humanEvents":0,"lastHumanChannel":null,"latestVersion":4,"counted":1,"pruned":0}}`
	if len(a.AcknowledgeNotices) != 1 || a.AcknowledgeNotices[0].Outcome != "acknowledged" || string(a.AcknowledgeNotices[0].FollowUp) != want4 {
		t.Fatalf("acknowledgeNotices: got %+v, want acknowledged with followUp %s", a.AcknowledgeNotices, want4)
	}
	decode(t, ws.nextData(), &s)
	if diff := cmp.Diff(want4, string(s.StaleNotices)); diff != "" {
		t.Fatalf("staleNotices follow-up (-want +got):\n%s", diff)
	}
}
