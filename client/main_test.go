package client

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine of a Recorder or Watcher ends in its Close. The service a test runs
// in process (lifecycle_test.go) leaves gorm's statement cache goroutine behind, which
// never stops (gorm.io/gorm/internal/lru: "done channel is never closed").
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}
