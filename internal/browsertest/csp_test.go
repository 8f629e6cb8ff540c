package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// watchCSP makes every document of b's tab record the Content-Security-Policy
// violations it reports (a script added through the DevTools protocol, which the
// policy does not apply to), for cspViolations.
func (b *browser) watchCSP(t *testing.T) {
	t.Helper()
	b.do(t, 5*time.Second, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
			window.__csp = [];
			document.addEventListener('securitypolicyviolation', (e) =>
				window.__csp.push(e.effectiveDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile + ':' + e.lineNumber));`})
		return err
	}))
}

// cspViolations returns the violations the current document recorded.
func (b *browser) cspViolations(t *testing.T) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(b.str(t, `JSON.stringify(window.__csp || ['the violation recorder did not run'])`)), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPagesWorkUnderTheirSecurityPolicy: the dashboard and the playground work under
// the Content-Security-Policy they are served with (web.DashboardPolicy,
// web.PlaygroundPolicy): live notices over the WebSocket, the chart, a session's
// timeline, the sessions list, a GraphiQL query and subscription, each page without
// one violation; and a page of another origin cannot frame either (frame-ancestors
// 'none', X-Frame-Options DENY).
func TestPagesWorkUnderTheirSecurityPolicy(t *testing.T) {
	b := newBrowser(t)
	b.watchCSP(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	seedScene(t, srv)
	violations := func(where string) {
		t.Helper()
		for _, v := range b.cspViolations(t) {
			t.Errorf("%s: Content-Security-Policy violation: %s", where, v)
		}
	}

	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"))
	b.do(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="connected"]`)))
	b.do(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#notice-list .notice`)))
	b.do(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#activity-chart svg`)))
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "child_spawned", "actorType": "agent",
		"actorId": manager, "watchers": []string{manager}})
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "human_direct_message", "actorType": "human", "channel": "telegram"})
	b.do(t, noticeWithin, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#notice-list .notice[data-target=%q]`, worker))))
	violations("the dashboard's notices")

	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+worker),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li[data-seq="2"]`)))
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "goal_changed", "actorType": "agent"})
	b.do(t, noticeWithin, chromedp.WaitVisible(chromedp.CSS(`#timeline li[data-seq="3"]`)))
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`#sessions-table tbody tr[data-key]`)))
	violations("a session's page and the sessions list")

	query := `{ sessionsList { sessions { sessionKey } } }`
	b.do(t, 30*time.Second,
		chromedp.Navigate(srv.URL+"/playground?query="+url.QueryEscape(query)),
		chromedp.WaitVisible(chromedp.CSS(`.graphiql-container .graphiql-execute-button`)),
		chromedp.Click(chromedp.CSS(`.graphiql-execute-button`)))
	b.waitJS(t, 10*time.Second, `(document.querySelector('.graphiql-response') || {innerText: ''}).innerText.includes(`+js(worker)+`)`)
	sub := `subscription { stateEvents(sessionKey: "` + worker + `") { sequence kind summary } }`
	b.do(t, 30*time.Second,
		chromedp.Navigate(srv.URL+"/playground?query="+url.QueryEscape(sub)),
		chromedp.WaitVisible(chromedp.CSS(`.graphiql-container .graphiql-execute-button`)))
	runPlaygroundSubscription(t, b, srv, worker, "csp-playground-subscription")
	violations("the playground")

	// Another origin (localhost on another port) frames both pages: Chromium refuses.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	framer := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><iframe id="dash" src="%s/"></iframe><iframe id="pg" src="%s/playground"></iframe>`, srv.URL, srv.URL)
	})}
	go func() { _ = framer.Serve(ln) }()
	t.Cleanup(func() { _ = framer.Close() })
	b.do(t, 20*time.Second, chromedp.Navigate("http://"+ln.Addr().String()+"/"))
	var tree *page.FrameTree
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.do(t, 5*time.Second, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			res, err := chromedp.Call(ctx, page.GetFrameTree, cdp.Empty{})
			tree = res.FrameTree
			return err
		}))
		loaded := 0
		for _, c := range tree.ChildFrames {
			if strings.HasPrefix(c.Frame.URL, srv.URL) {
				t.Errorf("the frame of %s loaded in a page of another origin", c.Frame.URL)
			}
			if c.Frame.URL != "" && c.Frame.URL != "about:blank" {
				loaded++
			}
		}
		if loaded == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, c := range tree.ChildFrames {
		t.Logf("framed: %s (unreachable URL %q)", c.Frame.URL, c.Frame.UnreachableURL)
	}
	if len(tree.ChildFrames) != 2 {
		t.Errorf("the framing page has %d frames, want 2", len(tree.ChildFrames))
	}
}
