package awareness

import (
	"testing"

	"go.uber.org/goleak"
)

// gormLRU is the expiry goroutine of GORM's prepared-statement cache, which GORM never
// stops (gorm.io/gorm/internal/lru: "done channel is never closed"). The scenario tests
// (package awareness_test) open the real SQLite store, which starts one per store.
const gormLRU = "gorm.io/gorm/internal/lru.NewLRU[...].func1"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(gormLRU)) }
