package rawappend

import (
	"context"
	"path/filepath"
	"testing"
)

// TestAppendCommitsTheHeadAndTheEvents: one Append is one transaction of head upserts
// and event inserts, the sequence assigned by the head, on a pool that runs WAL with
// synchronous=FULL.
func TestAppendCommitsTheHeadAndTheEvents(t *testing.T) {
	ctx := context.Background()
	a, db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "raw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := CheckSQLitePragmas(db); err != nil {
		t.Fatal(err)
	}
	keys := []string{"agent:bench:x", "agent:bench:y", "agent:bench:x"}
	if err := a.Append(ctx, len(keys), func(k int) Session { return Session{Agent: "bench", Key: keys[k], Kind: "main"} }); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, 1, func(int) Session { return Session{Agent: "bench", Key: "agent:bench:x", Kind: "main"} }); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := db.QueryRow("SELECT state_version FROM sessions WHERE agent_id = 'bench' AND session_key = 'agent:bench:x'").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != 3 {
		t.Errorf("head of x at version %d, want 3", version)
	}
	rows, err := db.Query("SELECT sequence FROM events WHERE agent_id = 'bench' AND session_key = 'agent:bench:x' ORDER BY sequence")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seqs []int
	for rows.Next() {
		var s int
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	if len(seqs) != 3 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 {
		t.Errorf("events of x: sequences %v, want [1 2 3]", seqs)
	}
}
