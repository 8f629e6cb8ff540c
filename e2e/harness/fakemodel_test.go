package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fake model APIs: the Anthropic Messages API (Claude Code), the OpenAI
// Responses API (Codex) and the OpenAI Chat Completions API (OpenClaw's
// openai-completions provider), streaming, on loopback. Each logs every request body, so a
// test asserts what the model was shown, and answers from the test's script.

// reply is one answer of the fake model: text, or a call of one tool.
type reply struct {
	Text     string
	Tool     string         // a tool to call instead of answering
	ToolArgs map[string]any // its input
	Status   int            // chat only: answer this HTTP error status instead
}

// modelRequest is one request the fake model received.
type modelRequest struct {
	At   time.Time
	Path string
	Body []byte
	JSON map[string]any
}

// Has reports whether the body contains s, counting JSON escapes: s is compared with
// the body as a JSON string would hold it.
func (r modelRequest) Count(s string) int {
	enc, _ := json.Marshal(s)
	return strings.Count(string(r.Body), string(enc[1:len(enc)-1]))
}

// fakeModel is one fake API server.
type fakeModel struct {
	t   *testing.T
	srv *http.Server
	url string

	mu       sync.Mutex
	requests []modelRequest
	// script answers each main request (one with tools); nil answers "ok".
	script func(i int, r modelRequest) reply
	mains  int
	// onRequest is told of each main request after it is logged (nil: nothing).
	changed chan struct{}
}

func startFakeModel(t *testing.T, kind string) *fakeModel {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeModel{t: t, url: "http://" + ln.Addr().String(), changed: make(chan struct{}, 1)}
	handler := m.anthropic
	switch kind {
	case "responses":
		handler = m.responses
	case "chat":
		handler = m.chat
	}
	m.srv = &http.Server{Handler: http.HandlerFunc(handler), ReadHeaderTimeout: 10 * time.Second}
	go m.srv.Serve(ln)
	t.Cleanup(func() { m.srv.Close() })
	return m
}

// setScript replaces the script.
func (m *fakeModel) setScript(f func(i int, r modelRequest) reply) {
	m.mu.Lock()
	m.script = f
	m.mu.Unlock()
}

// log records a request and returns the reply for it; main says whether it is a
// request of the agent's loop (it offers tools).
func (m *fakeModel) log(r *http.Request) (modelRequest, reply, bool) {
	body, _ := io.ReadAll(r.Body)
	req := modelRequest{At: time.Now(), Path: r.URL.Path, Body: body}
	_ = json.Unmarshal(body, &req.JSON)
	tools, _ := req.JSON["tools"].([]any)
	main := len(tools) > 0
	m.mu.Lock()
	m.requests = append(m.requests, req)
	rep := reply{Text: "ok"}
	if main {
		if m.script != nil {
			rep = m.script(m.mains, req)
		}
		m.mains++
	}
	m.mu.Unlock()
	select {
	case m.changed <- struct{}{}:
	default:
	}
	return req, rep, main
}

// mainRequests returns the agent-loop requests received so far.
func (m *fakeModel) mainRequests() []modelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []modelRequest
	for _, r := range m.requests {
		if tools, _ := r.JSON["tools"].([]any); len(tools) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// waitMain waits until n agent-loop requests arrived and returns them.
func (m *fakeModel) waitMain(n int, within time.Duration) []modelRequest {
	m.t.Helper()
	deadline := time.After(within)
	for {
		if rs := m.mainRequests(); len(rs) >= n {
			return rs
		}
		select {
		case <-m.changed:
		case <-deadline:
			m.t.Fatalf("the fake model got %d agent requests within %v, want %d", len(m.mainRequests()), within, n)
		}
	}
}

func sse(w io.Writer, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
}

// anthropic serves the Messages API: POST /v1/messages, streaming or not, and
// count_tokens.
func (m *fakeModel) anthropic(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/messages") {
		m.log(r)
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not here"}}`, http.StatusNotFound)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		m.log(r)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"input_tokens":100}`)
		return
	}
	req, rep, _ := m.log(r)
	model, _ := req.JSON["model"].(string)
	id := fmt.Sprintf("msg_%d", time.Now().UnixNano())
	var block map[string]any
	var delta map[string]any
	stop := "end_turn"
	if rep.Tool != "" {
		args, _ := json.Marshal(rep.ToolArgs)
		block = map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", time.Now().UnixNano()), "name": rep.Tool, "input": map[string]any{}}
		delta = map[string]any{"type": "input_json_delta", "partial_json": string(args)}
		stop = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": ""}
		delta = map[string]any{"type": "text_delta", "text": rep.Text}
	}
	usage := map[string]any{"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if stream, _ := req.JSON["stream"].(bool); !stream {
		content := block
		if rep.Tool != "" {
			content = map[string]any{"type": "tool_use", "id": block["id"], "name": rep.Tool, "input": rep.ToolArgs}
		} else {
			content = map[string]any{"type": "text", "text": rep.Text}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
			"content": []any{content}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message",
		"role": "assistant", "model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block})
	sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": delta})
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 10}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// responses serves the Responses API: POST /v1/responses, streaming.
func (m *fakeModel) responses(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		m.log(r)
		http.Error(w, `{"error":{"message":"not here","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	req, rep, _ := m.log(r)
	model, _ := req.JSON["model"].(string)
	id := fmt.Sprintf("resp_%d", time.Now().UnixNano())
	var item map[string]any
	if rep.Tool != "" {
		args, _ := json.Marshal(rep.ToolArgs)
		item = map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": "call_" + id, "name": rep.Tool,
			"arguments": string(args), "status": "completed"}
	} else {
		item = map[string]any{"type": "message", "id": "msg_" + id, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": rep.Text, "annotations": []any{}}}}
	}
	usage := map[string]any{"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 110}
	resp := func(status string, output []any) map[string]any {
		out := map[string]any{"id": id, "object": "response", "created_at": time.Now().Unix(), "status": status, "model": model, "output": output}
		if status == "completed" {
			out["usage"] = usage
		}
		return out
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	seq := 0
	ev := func(typ string, data map[string]any) {
		data["type"] = typ
		data["sequence_number"] = seq
		seq++
		sse(w, typ, data)
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []any{})})
	ev("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	if rep.Tool == "" {
		ev("response.output_text.delta", map[string]any{"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": rep.Text})
	}
	ev("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	ev("response.completed", map[string]any{"response": resp("completed", []any{item})})
}

// chat serves the Chat Completions API: POST /v1/chat/completions, streaming or not,
// and GET /v1/models.
func (m *fakeModel) chat(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[]}`)
		return
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		m.log(r)
		http.Error(w, `{"error":{"message":"not here","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	req, rep, _ := m.log(r)
	if rep.Status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		io.WriteString(w, `{"error":{"message":"the fake model fails this request","type":"invalid_request_error"}}`)
		return
	}
	model, _ := req.JSON["model"].(string)
	id := fmt.Sprintf("chatcmpl-%d", time.Now().UnixNano())
	msg := map[string]any{"role": "assistant", "content": rep.Text}
	finish := "stop"
	if rep.Tool != "" {
		args, _ := json.Marshal(rep.ToolArgs)
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"index": 0,
			"id": fmt.Sprintf("call_%d", time.Now().UnixNano()), "type": "function",
			"function": map[string]any{"name": rep.Tool, "arguments": string(args)}}}}
		finish = "tool_calls"
	}
	usage := map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
	if stream, _ := req.JSON["stream"].(bool); !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	chunk := func(delta map[string]any, finish any, usage any) {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if usage != nil {
			c["usage"] = usage
		}
		sse(w, "", c)
	}
	chunk(msg, nil, nil)
	chunk(map[string]any{}, finish, usage)
	io.WriteString(w, "data: [DONE]\n\n")
}
