package models

import (
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
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
