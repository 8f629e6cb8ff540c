package wsgorilla

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// msgType and msg have the shape of gqlgen's server message structs
// (transport.Websocket's graphqltransportwsMessage and graphqlwsMessage), whose
// encoding clients of either transport see.
type msgType string

func (t msgType) MarshalText() ([]byte, error) { return []byte(t), nil }

type msg struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	ID      string          `json:"id,omitempty"`
	Type    msgType         `json:"type"`
}

// The frame written without a second json.Marshal is byte for byte what json.Marshal
// writes, for every id a client may choose and payloads as gqlgen encodes them.
func TestAppendMessageMatchesEncodingJSON(t *testing.T) {
	payload, _ := json.Marshal(map[string]any{"data": map[string]any{"text": "a <b> & \"c\" \u2028 é 😀"}})
	ids := []string{"", "1", "notices", "a\"b", `back\slash`, "tab\there", "\x00\x1f", "<script>&", "é", "😀", "\u2028\u2029", "bad\xffutf8"}
	for _, id := range ids {
		for _, p := range []json.RawMessage{nil, payload, json.RawMessage(`[{"message":"x"}]`)} {
			for _, typ := range []msgType{"next", "complete", "error", "pong"} {
				v := &msg{Payload: p, ID: id, Type: typ}
				want, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if got := appendMessage(nil, message{payload: p, id: id, kind: string(typ)}); string(got) != string(want) {
					t.Errorf("id %q payload %s type %s:\n got %s\nwant %s", id, p, typ, got, want)
				}
			}
		}
	}
}

// The write watch ends a write that has run for the timeout, measured from the start
// of that write, and never one that finished; idle connections hold no armed timer.
func TestWriteWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 10 * time.Second
		var expired atomic.Int32
		w := newWriteWatch(timeout, func() { expired.Add(1) })
		defer w.stop()

		// Short writes, back to back for longer than the timeout: never expired, and
		// each one that ends leaves no timer set, which would start a goroutine when it
		// fired on the idle connection.
		for range 30 {
			w.begin()
			time.Sleep(timeout / 4)
			w.end()
			if w.armed.Load() || w.timer.Stop() {
				t.Fatal("the timer is still set after the write ended")
			}
		}
		// Idle for long: nothing fires, nothing is armed.
		time.Sleep(3 * timeout)
		synctest.Wait()
		if got := expired.Load(); got != 0 {
			t.Fatalf("expired %d times during short writes", got)
		}
		if w.armed.Load() {
			t.Fatal("the timer is still armed on an idle connection")
		}

		// A write that blocks: still alive just before its own timeout, which counts
		// from its start even though the timer was armed earlier.
		w.begin()
		time.Sleep(timeout / 2)
		w.end()
		w.begin()
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if got := expired.Load(); got != 0 {
			t.Fatalf("expired %d times before the write's timeout", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := expired.Load(); got != 1 {
			t.Fatalf("expired %d times at the write's timeout, want 1", got)
		}
	})
}
