package models

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/modeltest"
)

// TestSQLiteNoticeModel is the model-based property test of SPEC §3–4 (WAT-*, NTC-*)
// against a real SQLite file, restarts included.
func TestSQLiteNoticeModel(t *testing.T) {
	modeltest.Run(t, func(t *testing.T) modeltest.Database {
		path := filepath.Join(t.TempDir(), "model.db")
		return func() (awareness.Store, error) {
			return OpenSQLite(context.Background(), path, Options{})
		}
	})
}
