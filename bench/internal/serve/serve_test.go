package serve

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTriggersAnswerThenSend(t *testing.T) {
	var log []string
	tr := Triggers{
		Notify: func(watcher int, target string) (int, func(), error) {
			log = append(log, "prepare notify "+target)
			if target == "bad" {
				return 0, nil, errors.New("bad target")
			}
			return 1, func() { log = append(log, "send") }, nil
		},
		Broadcast: func(target string, count int) (int, func(), error) {
			log = append(log, "prepare broadcast "+target)
			return count, nil, nil
		},
	}
	mux := http.NewServeMux()
	tr.Register(mux)
	post := func(path, body string) (int, string) {
		rec := &recorder{ResponseRecorder: httptest.NewRecorder(), log: &log}
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	if code, body := post("/notify", `{"watcher": 3, "target": "agent:main:x"}`); code != 200 || body != `{"sent":1}` {
		t.Errorf("notify = %d %q, want 200 {\"sent\":1}", code, body)
	}
	if want := "prepare notify agent:main:x,flush,send"; strings.Join(log, ",") != want {
		t.Errorf("order = %v, want %s (the answer is flushed before the notices are sent)", log, want)
	}
	if code, body := post("/broadcast", `{"target": "t", "count": 7}`); code != 200 || body != `{"sent":7}` {
		t.Errorf("broadcast = %d %q, want 200 {\"sent\":7}", code, body)
	}
	for _, body := range []string{`{`, `{"target": "bad"}`} {
		if code, _ := post("/notify", body); code != http.StatusBadRequest {
			t.Errorf("notify %s = %d, want 400", body, code)
		}
	}
}

// recorder logs flushes into the triggers' log.
type recorder struct {
	*httptest.ResponseRecorder
	log *[]string
}

func (r *recorder) Flush() {
	*r.log = append(*r.log, "flush")
	r.ResponseRecorder.Flush()
}

func TestWriteStats(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteStats(rec, 4, map[string]any{"frames_sent": 9})
	var m map[string]float64
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"goroutines", "heap_inuse", "stack_inuse", "sys"} {
		if m[k] <= 0 {
			t.Errorf("stats[%q] = %v, want the runtime's counter", k, m[k])
		}
	}
	if m["subscriptions"] != 4 || m["frames_sent"] != 9 {
		t.Errorf("stats = %v, want subscriptions 4 and frames_sent 9", m)
	}
}
