package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// post sends body as JSON to path on the server under test (with -header) and returns
// the answer's body; a status other than 200 is an error. GraphQL and the baseline's
// triggers go through it.
func (r *runner) post(ctx context.Context, path string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.Base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if k, v, ok := strings.Cut(r.cfg.header, ":"); ok {
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: HTTP %d: %.300s", path, resp.StatusCode, data)
	}
	return data, nil
}

// gql runs one GraphQL operation and decodes its data into dst.
func (r *runner) gql(ctx context.Context, query string, vars map[string]any, dst any) error {
	data, err := r.post(ctx, "/query", map[string]any{"query": query, "variables": vars})
	if err != nil {
		return err
	}
	return decodeGQL(data, dst)
}

// decodeGQL decodes a GraphQL answer's data into dst (nil: only checked); GraphQL
// errors are an error.
func decodeGQL(data []byte, dst any) error {
	var resp struct {
		Data   json.RawMessage   `json:"data"`
		Errors []json.RawMessage `json:"errors"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return err
	}
	if len(resp.Errors) > 0 {
		return fmt.Errorf("GraphQL errors: %s", resp.Errors[0])
	}
	if dst != nil {
		return json.Unmarshal(resp.Data, dst)
	}
	return nil
}

const recordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded noticesOpened } }`

type recordAnswer struct {
	RecordEvent struct {
		Recorded      bool `json:"recorded"`
		NoticesOpened int  `json:"noticesOpened"`
	} `json:"recordEvent"`
}

func (r *runner) record(ctx context.Context, in map[string]any) (recordAnswer, error) {
	var a recordAnswer
	err := r.gql(ctx, recordMutation, map[string]any{"in": in}, &a)
	return a, err
}

// trigger makes one notice (or one broadcast) happen and returns when it was sent and
// when the answer was read, and how many notices the server says it opened or sent.
func (r *runner) trigger(ctx context.Context, target string, watcher, count int) (sent, answered time.Time, n int, err error) {
	sent = time.Now()
	if r.cfg.mode == "service" {
		var a recordAnswer
		a, err = r.record(ctx, map[string]any{"sessionKey": target, "kind": "human_direct_message",
			"actorType": "human", "actorId": "user:bench"})
		n = a.RecordEvent.NoticesOpened
	} else {
		var data []byte
		if count > 0 {
			data, err = r.post(ctx, "/broadcast", map[string]any{"target": target, "count": count})
		} else {
			data, err = r.post(ctx, "/notify", map[string]any{"target": target, "watcher": watcher})
		}
		var a struct {
			Sent int `json:"sent"`
		}
		if err == nil {
			err = json.Unmarshal(data, &a)
		}
		n = a.Sent
	}
	return sent, time.Now(), n, err
}
