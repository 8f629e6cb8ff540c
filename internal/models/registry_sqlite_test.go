package models

import (
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/storetest"
)

func TestSQLiteRegistryConformance(t *testing.T) {
	storetest.RunRegistry(t, func(t *testing.T) awareness.Store { return MustOpenSQLite(t) })
}
