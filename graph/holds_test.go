package graph_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/awareness/awareness/client"
)

// RDL-1, RDL-2 through /query: drainNotices hands a notice out once and records the
// drain; a watch's maxRedeliver is checked; snoozeNotice hides it and refuses bad
// inputs with a code, writing nothing; dismissNotice acknowledges it and says so.
func TestDrainSnoozeDismissOverHTTP_RDL1_RDL2(t *testing.T) {
	e := newEnv(t)
	const w = "agent:main:main"
	const tgt = "agent:main:direct:alice"
	e.mustPost(t, `mutation { watch(input: {watcher: "agent:main:main", target: "agent:main:direct:alice", maxRedeliver: 2}) { watched } }`, nil)
	_, r, _ := e.post(t, `mutation { watch(input: {watcher: "agent:main:main", target: "agent:main:direct:bob", maxRedeliver: -1}) { watched } }`, nil)
	if r.code() != "INVALID_ARGUMENT" {
		t.Errorf("maxRedeliver -1: code %q, want INVALID_ARGUMENT", r.code())
	}
	if got := e.pendingOf(t, w); len(got) != 0 {
		t.Fatalf("pending before any event: %+v", got)
	}
	e.record(t, map[string]any{"sessionKey": tgt, "kind": "human_direct_message", "actorType": "human", "channel": "slack"})

	type drained struct {
		Target          string `json:"target"`
		NotifiedVersion int    `json:"notifiedVersion"`
		Redelivered     bool   `json:"redelivered"`
	}
	drain := func() []drained {
		var d struct {
			DrainNotices []drained `json:"drainNotices"`
		}
		decode(t, e.mustPost(t, `mutation { drainNotices(watcher: "agent:main:main") { target notifiedVersion redelivered } }`, nil), &d)
		return d.DrainNotices
	}
	if got := drain(); len(got) != 1 || got[0].Target != tgt || got[0].NotifiedVersion != 1 || got[0].Redelivered {
		t.Fatalf("first drain: %+v", got)
	}
	if got := drain(); len(got) != 0 {
		t.Fatalf("a drained notice, neither acknowledged nor released, was drained again at once: %+v", got)
	}
	// Released, it is handed out by the next drain (not as a redelivery).
	e.mustPost(t, `mutation { releaseNotices(watcher: "agent:main:main", notices: [{target: "agent:main:direct:alice", notifiedVersion: 1}]) { target } }`, nil)
	if got := drain(); len(got) != 1 || got[0].Redelivered {
		t.Fatalf("drain after release: %+v", got)
	}

	for name, tc := range map[string]struct {
		until, code string
		version     int
	}{
		"past":     {time.Now().Add(-time.Minute).UTC().Format(time.RFC3339), "INVALID_ARGUMENT", 1},
		"too far":  {time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339), "INVALID_ARGUMENT", 1},
		"unknown":  {time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "NOT_FOUND", 9},
		"version0": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "INVALID_ARGUMENT", 0},
	} {
		_, r, raw := e.post(t, `mutation($u: Time!, $v: Int!) { snoozeNotice(watcher: "agent:main:main", target: "agent:main:direct:alice", notifiedVersion: $v, until: $u) { target } }`,
			map[string]any{"u": tc.until, "v": tc.version})
		if r.code() != tc.code {
			t.Errorf("snooze %s: %s, want %s", name, raw, tc.code)
		}
	}
	if got := e.pendingOf(t, w); len(got) != 1 {
		t.Fatalf("a refused snooze changed the pending notices: %+v", got)
	}
	e.mustPost(t, `mutation($u: Time!) { snoozeNotice(watcher: "agent:main:main", target: "agent:main:direct:alice", notifiedVersion: 1, until: $u) { target redelivered } }`,
		map[string]any{"u": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if got := e.pendingOf(t, w); len(got) != 0 {
		t.Fatalf("a snoozed notice is listed: %+v", got)
	}

	var d struct {
		DismissNotice json.RawMessage `json:"dismissNotice"`
	}
	decode(t, e.mustPost(t, `mutation { dismissNotice(watcher: "agent:main:main", target: "agent:main:direct:alice", notifiedVersion: 1) { target notifiedVersion outcome dismissed followUp { target } } }`, nil), &d)
	if want := `{"target":"agent:main:direct:alice","notifiedVersion":1,"outcome":"acknowledged","dismissed":true,"followUp":null}`; string(d.DismissNotice) != want {
		t.Errorf("dismissNotice: got %s, want %s", d.DismissNotice, want)
	}
	_, r, raw := e.post(t, `mutation { dismissNotice(watcher: "agent:main:main", target: "agent:main:direct:alice", notifiedVersion: 1) { dismissed } }`, nil)
	if r.code() != "NOT_FOUND" {
		t.Errorf("dismissing it again: %s, want NOT_FOUND", raw)
	}
}

// DIG-1, RDL-1, RDL-2 through the Go client's calls: PendingDigests, DrainNotices,
// ReleaseNotices, SnoozeNotice and DismissNotice against the real handler.
func TestGoClientDigestDrainSnoozeDismiss_DIG1_RDL1_RDL2(t *testing.T) {
	e := newEnv(t)
	c, err := client.New(e.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const w = "agent:main:main"
	tgt := client.Target{SessionKey: "agent:main:direct:alice"}
	if res, err := c.WatchTargetRedeliver(ctx, w, tgt, 2); err != nil || !res.Watched {
		t.Fatalf("watch: %+v, %v", res, err)
	}
	e.record(t, map[string]any{"sessionKey": tgt.SessionKey, "kind": "human_direct_message", "actorType": "human", "channel": "slack"})
	ns, err := c.PendingDigests(ctx, w)
	if err != nil || len(ns) != 1 || ns[0].Digest == nil || ns[0].Digest.HumanEvents != 1 ||
		ns[0].Digest.LastHumanChannel == nil || *ns[0].Digest.LastHumanChannel != "slack" || ns[0].Digest.LatestVersion != 1 {
		t.Fatalf("PendingDigests: %+v, %v", ns, err)
	}
	d, err := c.DrainNotices(ctx, w)
	if err != nil || len(d) != 1 || d[0].Redelivered {
		t.Fatalf("DrainNotices: %+v, %v", d, err)
	}
	if again, _ := c.DrainNotices(ctx, w); len(again) != 0 {
		t.Fatalf("drained twice: %+v", again)
	}
	if r, err := c.ReleaseNotices(ctx, w, d); err != nil || len(r) != 1 {
		t.Fatalf("ReleaseNotices: %+v, %v", r, err)
	}
	sn, err := c.SnoozeNotice(ctx, d[0], time.Now().Add(time.Hour))
	if err != nil || sn.NotifiedVersion != 1 {
		t.Fatalf("SnoozeNotice: %+v, %v", sn, err)
	}
	if _, err := c.SnoozeNotice(ctx, d[0], time.Now().Add(-time.Hour)); client.ErrorCode(err) != "INVALID_ARGUMENT" {
		t.Errorf("SnoozeNotice in the past: %v", err)
	}
	a, err := c.DismissNotice(ctx, d[0])
	if err != nil || !a.Dismissed || a.Outcome != client.AckAcknowledged {
		t.Fatalf("DismissNotice: %+v, %v", a, err)
	}
}
