package mcpserver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the server, its sessions, feeds and senders start ends with them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
