package models

import (
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/storetest"
)

// TestSQLiteUpstreamConformance runs the UpstreamStore conformance suite (UPS-1..5).
func TestSQLiteUpstreamConformance(t *testing.T) {
	storetest.RunUpstream(t, func(t *testing.T) awareness.Store { return MustOpenSQLite(t) })
}
