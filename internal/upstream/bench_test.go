package upstream_test

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCycle measures one monitor cycle over 1,000 watched links on a real SQLite
// file: "active" appends one human prompt (plus an assistant line) to every transcript
// before each cycle, so every link records an event; "idle" appends an assistant line
// only, so every link is scanned and settled without an event. The links/s metric is
// links handled per second of cycle time.
func BenchmarkCycle(b *testing.B) {
	const links = 1000
	for _, mode := range []string{"active", "idle"} {
		b.Run(fmt.Sprintf("%s/links=%d", mode, links), func(b *testing.B) {
			e := newBenchEnv(b, links)
			var total time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				for j := range links {
					line := assistantLine("ok")
					if mode == "active" {
						line = userLine(fmt.Sprintf("prompt %d", i)) + line
					}
					e.write(fmt.Sprintf("t%04d", j), line)
				}
				b.StartTimer()
				start := time.Now()
				st, err := e.mon.RunOnce(e.ctx)
				total += time.Since(start)
				if err != nil || st.Checked != links || st.Errors != 0 {
					b.Fatalf("cycle: %+v, %v", st, err)
				}
				if want := map[string]int{"active": links, "idle": 0}[mode]; st.Events != want {
					b.Fatalf("events = %d, want %d", st.Events, want)
				}
			}
			b.ReportMetric(float64(links*b.N)/total.Seconds(), "links/s")
		})
	}
}

func newBenchEnv(b *testing.B, links int) *env {
	b.Helper()
	e := newEnv(b)
	for j := range links {
		thread := fmt.Sprintf("t%04d", j)
		key := fmt.Sprintf("agent:main:acp:bench%04d", j)
		e.write(thread, userLine("history"))
		e.adopt(key, thread)
		e.watch(watcherKey, key)
	}
	return e
}
