// Package wsgorillatest holds what tests of the WebSocket transport share across
// packages.
package wsgorillatest

import (
	"runtime"
	"strings"
)

// Goroutines returns how many goroutines run, and how many of them are a WebSocket
// connection's (its reader, or an operation's response loop, in package wsgorilla).
func Goroutines() (total, conn int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/wsgorilla.(*Conn).") {
			conn++
		}
	}
	return runtime.NumGoroutine(), conn
}
