package client

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine of a Recorder or Watcher ends in its Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
