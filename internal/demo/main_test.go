package demo_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Run owns no goroutine: none but gorm's may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
