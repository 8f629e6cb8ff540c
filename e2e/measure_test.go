package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMeasureNoticeLatency measures, on the real binary, the time from the recordEvent
// HTTP response (the append is committed) to the notice frame read by a gorilla
// graphql-transport-ws subscriber: one subscriber, 1,000 samples, each on a new
// (watcher, target) pair. It only logs numbers. A negative value means the frame was
// read before the HTTP response (the hub publishes before the resolver returns).
//
//	AWARENESS_MEASURE=1 go test -run TestMeasureNoticeLatency -v ./e2e/
func TestMeasureNoticeLatency(t *testing.T) {
	if os.Getenv("AWARENESS_MEASURE") != "1" {
		t.Skip("set AWARENESS_MEASURE=1 to measure notice latency")
	}
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	ws := dialWS(t, s.wsURL)
	ws.subscribe("m", mainWatcher)
	const warm, samples = 50, 1000
	var afterResp, fromReq, appendRTT []time.Duration
	negative := 0
	for i := range warm + samples {
		target := "agent:main:subagent:m" + itoa(i)
		t0 := time.Now()
		s.mustRecord(t, map[string]any{
			"sessionKey": target, "kind": "human_direct_message", "actorType": "human",
			"watchers": []string{mainWatcher},
		})
		t1 := time.Now()
		n, at := ws.nextNotice("m")
		if n.Target != target {
			t.Fatalf("sample %d: notice for %s, want %s", i, n.Target, target)
		}
		if i < warm {
			continue
		}
		d := at.Sub(t1)
		if d < 0 {
			negative++
		}
		afterResp = append(afterResp, d)
		fromReq = append(fromReq, at.Sub(t0))
		appendRTT = append(appendRTT, t1.Sub(t0))
	}
	r, q, a := summarize(afterResp), summarize(fromReq), summarize(appendRTT)
	t.Logf("notice latency, HTTP response -> frame read (%d samples): p50 %v p90 %v p99 %v max %v min %v; %d frames read before the response",
		samples, r.p50, r.p90, r.p99, r.max, r.min, negative)
	t.Logf("notice latency, HTTP request sent -> frame read: p50 %v p90 %v p99 %v max %v", q.p50, q.p90, q.p99, q.max)
	t.Logf("recordEvent round trip (committed append): p50 %v p90 %v p99 %v max %v", a.p50, a.p90, a.p99, a.max)
}
