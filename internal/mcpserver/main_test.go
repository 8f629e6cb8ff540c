package mcpserver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// gormLRU is the expiry goroutine of GORM's prepared-statement cache, which GORM never
// stops; the tests open the real SQLite store, which starts one per store.
const gormLRU = "gorm.io/gorm/internal/lru.NewLRU[...].func1"

// Every goroutine the server, its sessions, feeds and senders start ends with them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(gormLRU)) }
