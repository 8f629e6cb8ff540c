package demo_test

import (
	"testing"

	"go.uber.org/goleak"
)

// gormLRU is gorm's prepared-statement cache janitor, which gorm never stops.
const gormLRU = "gorm.io/gorm/internal/lru.NewLRU[...].func1"

// Run owns no goroutine: none but gorm's may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(gormLRU)) }
