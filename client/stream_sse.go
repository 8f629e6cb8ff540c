package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/tmaxmax/go-sse"
)

// sseStream is the SSE stream of one watcher session: graphql-sse in distinct
// connections mode, one POST per subscription.
type sseStream struct {
	cancel context.CancelFunc
}

// startSSELocked starts the stream of watcher; mu is held.
func (w *Watcher) startSSELocked(watcher string) {
	if w.closed || w.sse[watcher] != nil {
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	w.sse[watcher] = &sseStream{cancel: cancel}
	w.sseGroup.Add(1)
	go func() {
		defer w.sseGroup.Done()
		w.sseLoop(ctx, watcher)
	}()
}

// runSSE follows every watcher session over SSE until the Watcher closes or stops, or,
// under TransportAuto, until a WebSocket connection succeeds again: then it ends the
// streams and returns that connection for runWS.
func (w *Watcher) runSSE() *wsConn {
	w.mu.Lock()
	w.current = TransportSSE
	for watcher := range w.subs {
		w.startSSELocked(watcher)
	}
	w.updateUpLocked()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.current = TransportWebSocket // Add starts no stream from here on
		for watcher, s := range w.sse {
			s.cancel()
			delete(w.sse, watcher)
		}
		for _, s := range w.subs {
			s.up = false
		}
		w.updateUpLocked()
		w.mu.Unlock()
		w.sseGroup.Wait()
	}()
	var probe <-chan time.Time
	if w.opts.Transport == TransportAuto {
		t := time.NewTicker(w.opts.WebSocketRetry)
		defer t.Stop()
		probe = t.C
	}
	for {
		select {
		case <-w.ctx.Done():
			return nil
		case <-probe:
			c, serr := w.dialWS(w.ctx)
			if serr == nil {
				w.log.Info("the WebSocket upgrade works again; leaving SSE")
				return c
			}
			w.log.Debug("WebSocket still refused; staying on SSE", "status", serr.Status, "err", serr.Err)
		}
	}
}

// sseLoop keeps the stream of watcher open, with backoff, until ctx ends or the
// service refuses it for good.
func (w *Watcher) sseLoop(ctx context.Context, watcher string) {
	delay := w.opts.MinBackoff
	for ctx.Err() == nil {
		start := time.Now()
		serr := w.sseOnce(ctx, watcher)
		w.setUp(false, watcher)
		if ctx.Err() != nil {
			return
		}
		if serr.Fatal {
			if serr.Status == http.StatusUnauthorized || ErrorCode(serr.Err) == CodeUnauthenticated {
				w.streamFailed(serr)
				w.stop(serr)
			} else {
				w.dropWatcher(watcher, serr)
			}
			return
		}
		w.streamFailed(serr)
		if time.Since(start) > 2*w.opts.MaxBackoff {
			delay = w.opts.MinBackoff
		}
		t := time.NewTimer(max(delay+rand.N(delay/2+1), RetryAfter(serr.Err)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		delay = min(2*delay, w.opts.MaxBackoff)
	}
}

// watchdogReader cancels its stream when nothing was read for streamDead; the
// service sends a keep-alive comment every 15 s.
type watchdogReader struct {
	r io.Reader
	t *time.Timer
}

func (d *watchdogReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if n > 0 {
		d.t.Reset(streamDead)
	}
	return n, err
}

// sseOnce runs one SSE stream of watcher until it fails.
func (w *Watcher) sseOnce(ctx context.Context, watcher string) *StreamError {
	fail := func(status int, fatal bool, err error) *StreamError {
		return &StreamError{Transport: TransportSSE, Watcher: watcher, Status: status, Fatal: fatal, Err: err}
	}
	body, _ := json.Marshal(map[string]any{"query": subscribeNotices, "variables": map[string]any{"w": watcher}})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.c.endpoint, bytes.NewReader(body))
	if err != nil {
		return fail(0, true, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if a := w.c.authorization(); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := w.c.streamHTTP().Do(req)
	if err != nil {
		return fail(0, false, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var out struct {
			Errors []gqlError `json:"errors"`
		}
		var e error = fmt.Errorf("HTTP %d without an event stream", resp.StatusCode)
		if json.Unmarshal(raw, &out) == nil && len(out.Errors) > 0 {
			e = out.Errors[0].err(resp.StatusCode)
		}
		fatal := resp.StatusCode == http.StatusUnauthorized || Permanent(e)
		return fail(resp.StatusCode, fatal, e)
	}
	w.setUp(true, watcher)
	w.enqueueConfirm(watcher)
	dog := time.AfterFunc(streamDead, cancel)
	defer dog.Stop()
	for ev, err := range sse.Read(&watchdogReader{r: resp.Body, t: dog}, &sse.ReadConfig{MaxEventSize: 4 << 20}) {
		if err != nil {
			break
		}
		switch ev.Type {
		case "next":
			if serr := w.item(TransportSSE, watcher, []byte(ev.Data)); serr != nil {
				return serr
			}
			if w.subs0(watcher) {
				return fail(0, false, errors.New("the watcher was removed"))
			}
		case "complete":
			return fail(0, false, errors.New("the service completed the stream"))
		}
	}
	if ctx.Err() != nil && !dog.Stop() {
		return fail(0, false, fmt.Errorf("nothing received for %v", streamDead))
	}
	return fail(0, false, errors.New("the stream ended"))
}

// subs0 reports whether watcher is no longer followed.
func (w *Watcher) subs0(watcher string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.subs[watcher] == nil
}

// streamHTTP is the client's HTTP client without its overall timeout, for streams.
func (c *Client) streamHTTP() *http.Client {
	h := *c.http
	h.Timeout = 0
	return &h
}
