package awareness_test

import (
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/modeltest"
	"github.com/awareness/awareness/internal/models/storetest"
)

// openMem is the suites' open: a new, empty memStore closed by the test's cleanup.
func openMem(t *testing.T) awareness.Store {
	s := newMemStore()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestMemStoreConformance(t *testing.T) {
	storetest.RunAll(t, openMem, func(t *testing.T, s awareness.Store, c awareness.Cursor) {
		db, err := s.(*memStore).lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer db.mu.Unlock()
		c.TargetGeneration, c.WatcherGeneration = max(c.TargetGeneration, 1), max(c.WatcherGeneration, 1)
		db.save(c)
	})
}

// TestMemStoreNoticeModel runs the model-based test of the notice protocol (SPEC §3–4)
// on the memStore; its restarts reopen the same data, and another process's start
// opens a second handle beside the first.
func TestMemStoreNoticeModel(t *testing.T) {
	modeltest.Run(t, func(t *testing.T) modeltest.Database {
		db := newMemStore()
		return func() (awareness.Store, error) { return db.reopen(), nil }
	}, modeltest.Options{OtherProcess: true})
}
