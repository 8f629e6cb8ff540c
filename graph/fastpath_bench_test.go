package graph_test

import (
	"encoding/json"
	"strconv"
	"testing"
)

// BenchmarkRecordEventAnswer is BenchmarkRecordEventHTTP with the answer a producer
// that keeps its own cursor selects: the versions and the event as stored, which the
// fast path writes in one pass (graph/fastpath).
func BenchmarkRecordEventAnswer(b *testing.B) {
	const mutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded stateVersion noticesOpened
  event { sequence kind actorType actorId summary occurredAt runId payload sessionKey agentId } skippedWatchers { watcher reason } } }`
	h, _ := benchHandler(b, false)
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i], _ = json.Marshal(map[string]any{"query": mutation, "variables": map[string]any{"in": map[string]any{
			"sessionKey": "agent:main:target" + strconv.Itoa(i), "kind": "human_direct_message",
			"actorType": "human", "actorId": "user:bench", "summary": "a message", "channel": "telegram"}}})
	}
	benchPosts(b, h, bodies...)
}
