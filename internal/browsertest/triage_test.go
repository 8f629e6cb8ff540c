package browsertest

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The views a person triaging agent sessions uses: who is stale and for how long, the
// manager → sub-agent tree, the acknowledgement history, the sortable sessions table,
// the chart's time range and the keyboard shortcuts.

// spawnAndChange gives parent a pending notice about child (spawned by it, then changed
// by a person).
func spawnAndChange(t *testing.T, srv *server, parent, child string) {
	t.Helper()
	srv.record(t, map[string]any{"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	srv.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "channel": "telegram"})
}

// TestWhoIsStaleView: every watcher with a pending notice, the longest wait first, with
// its count, its oldest notice's age and target (Reconcile), and per agent; the list
// follows the feed: an acknowledgement elsewhere takes the watcher off at once.
func TestWhoIsStaleView(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	const (
		coder = "agent:main:subagent:coder"
		ops   = "agent:ops:main"
	)
	// The manager waits longest (two notices), then ops's main, then the coder.
	spawnAndChange(t, srv, manager, worker)
	time.Sleep(1100 * time.Millisecond)
	spawnAndChange(t, srv, ops, "agent:ops:subagent:x")
	time.Sleep(1100 * time.Millisecond)
	spawnAndChange(t, srv, manager, peer1)
	spawnAndChange(t, srv, coder, "agent:main:subagent:coder-child")

	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/stale"), chromedp.WaitVisible(chromedp.CSS(`#stale-watchers tr[data-watcher]`)))
	b.waitJS(t, 10*time.Second, `document.querySelectorAll('#stale-watchers tr[data-watcher]').length === 3 && `+allLive)
	if got := b.str(t, `[...document.querySelectorAll('#stale-watchers tr[data-watcher]')].map((r) => r.dataset.watcher + '=' + r.dataset.pending).join(' ')`); got != manager+"=2 "+ops+"=1 "+coder+"=1" {
		t.Errorf("watchers, longest wait first = %q", got)
	}
	if got := b.str(t, `[...document.querySelectorAll('#stale-agents tr[data-agent]')].map((r) => r.dataset.agent + ':' + r.dataset.watchers + '/' + r.dataset.pending).join(' ')`); got != "main:2/3 ops:1/1" {
		t.Errorf("agents = %q, want main:2/3 ops:1/1", got)
	}
	if got := b.text(t, `#stale-summary`); !strings.Contains(got, "3 watchers of 2 agents stale, 4 notices pending") {
		t.Errorf("summary = %q", got)
	}
	// The oldest notice's age is the manager's first, and Reconcile opens it at its L.
	row := `#stale-watchers tr[data-watcher="` + manager + `"]`
	if href := b.str(t, `document.querySelector('`+row+` a.reconcile').getAttribute('href')`); !strings.Contains(href, worker) || !strings.Contains(href, "since=1") {
		t.Errorf("Reconcile of the oldest = %q, want %s since 1", href, worker)
	}
	b.waitJS(t, 8*time.Second, `/^[0-9]+ s$/.test(document.querySelector('`+row+` .age').textContent) && Number(document.querySelector('`+row+` .age').textContent.split(' ')[0]) >= 2`)
	b.shots(t, "who-is-stale", `document.querySelectorAll('#stale-watchers tr[data-watcher]').length === 3`)

	srv.ackExact(t, coder, "agent:main:subagent:coder-child")
	b.waitJS(t, 2*time.Second, `!document.querySelector('#stale-watchers tr[data-watcher="`+coder+`"]') && document.querySelectorAll('#stale-watchers tr[data-watcher]').length === 2`)
}

// TestSessionTreeView: managers with their sub-agents nested under them (from
// child_spawned, and the registry's parent), each node's pending state (stale with its
// count and age, watchers waiting on it, in sync), a collapsed node's subtree sum, the
// keyboard (a summary toggles with Enter), and the live feed.
func TestSessionTreeView(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	seedScene(t, srv)
	const (
		coder = "agent:main:subagent:coder-19c2"
		child = "agent:main:subagent:coder-19c2-tests"
	)
	spawnAndChange(t, srv, coder, child) // the coder is stale about its own sub-agent
	srv.gql(t, `mutation { upsertSession(input: {sessionKey: "agent:main:subagent:adopted", parentSessionKey: "agent:main:main", displayName: "adopted by the registry"}) { sessionKey } }`, nil, nil)

	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/tree"), chromedp.WaitVisible(chromedp.CSS(`#tree .node[data-key="`+child+`"]`)))
	b.waitJS(t, 10*time.Second, allLive)
	under := func(parent, kid string) bool {
		return b.eval(t, `(() => { const d = [...document.querySelectorAll('#tree details')].find((d) => d.querySelector(':scope > summary .node').dataset.key === '`+parent+`');
			return d && d.querySelector(':scope > ul > li > .node[data-key="`+kid+`"], :scope > ul > li > details > summary > .node[data-key="`+kid+`"]') ? 1 : 0; })()`) == 1
	}
	for _, kid := range []string{"agent:main:subagent:research-7f3a", coder, "agent:main:subagent:review-42d8", "agent:main:subagent:adopted"} {
		if !under(manager, kid) {
			t.Errorf("%s is not under %s", kid, manager)
		}
	}
	if !under(coder, child) {
		t.Errorf("%s is not under %s", child, coder)
	}
	node := func(key string) string { return `#tree .node[data-key="` + key + `"]` }
	// The pending state comes with the notice feed.
	b.waitJS(t, 5*time.Second, `document.querySelector('`+node(manager)+`').dataset.held === '2'`)
	if n := b.count(t, node(coder)+` [data-stale]`); n != 1 {
		t.Errorf("the coder is not marked stale")
	}
	if got := b.str(t, `document.querySelector('`+node(coder)+`').dataset.about`); got != "2" {
		t.Errorf("watchers waiting on the coder = %q, want 2 (manager, research)", got)
	}
	if n := b.count(t, node("agent:main:subagent:review-42d8")+` [data-in-sync]`); n != 1 {
		t.Errorf("the reviewer (no notice held) is not in sync")
	}
	b.shots(t, "tree", `!!document.querySelector('`+node(child)+`')`)

	// Collapse the coder with the keyboard: its subtree's pending shows on it.
	b.do(t, 5*time.Second, chromedp.Focus(chromedp.CSS(`#tree details:has(> summary .node[data-key="`+coder+`"]) > summary`)), chromedp.KeyEvent(kb.Enter))
	hidden := `!document.querySelector('` + node(child) + `').checkVisibility()`
	b.waitJS(t, 2*time.Second, hidden+` && !!document.querySelector('`+node(coder)+` [data-subtree]')`)
	if got := b.str(t, `document.activeElement.closest('details') ? document.activeElement.closest('details').querySelector(':scope > summary .node').dataset.key : ''`); got != coder {
		t.Errorf("the focus left the collapsed node (on %q)", got)
	}
	b.do(t, 5*time.Second, chromedp.KeyEvent(kb.Enter))
	b.waitJS(t, 2*time.Second, `!(`+hidden+`)`)

	// Live: the coder acknowledges; the tree follows.
	srv.ackExact(t, coder, child)
	b.waitJS(t, 2*time.Second, `!!document.querySelector('`+node(coder)+` [data-in-sync]')`)
}

// TestAckHistoryView: who acknowledged which notice, when, from which client: the
// dashboard's own acknowledgement (token name, role, http, awareness-dashboard) and a
// gateway's named by its User-Agent; new acknowledgements arrive live; the filter
// narrows by watcher.
func TestAckHistoryView(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"), "--auth-file", authFile(t))
	srv.token = adminTok
	twoNotices(t, srv)
	spawnAndChange(t, srv, opsMain, opsChild)

	b.useToken(t, srv, adminTok, "/#/")
	b.do(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(cardSel("#notice-list", manager, worker))))
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(cardSel("#notice-list", manager, worker)+` button.ack`)))
	b.waitJS(t, 5*time.Second, `!document.querySelector(`+js(cardSel("#notice-list", manager, worker))+`)`)
	// A gateway acknowledges over HTTP with its own name.
	srv.gqlWith(t, opsTok, http.Header{"User-Agent": {"openclaw-gateway/2026.3 (linux)"}}, `mutation { ackNotices(watcher: "agent:ops:main") { target } }`)

	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/acks"))
	b.waitJS(t, 10*time.Second, `document.querySelectorAll('#ack-history tr[data-watcher]').length === 2 && `+allLive)
	rows := b.str(t, `[...document.querySelectorAll('#ack-history tr[data-watcher]')].map((r) => [r.dataset.watcher, r.querySelector('td[data-principal]').textContent, r.querySelector('td[data-transport]').textContent].join(' | ')).join('\n')`)
	want := opsMain + " | gw-ops agent:ops | http openclaw-gateway/2026.3 (linux)\n" + manager + " | dash admin | http awareness-dashboard"
	if rows != want {
		t.Errorf("history rows:\n%s\nwant:\n%s", rows, want)
	}
	if got := b.text(t, `#ack-history tr[data-watcher="`+manager+`"] td[data-label="L → N"]`); got != "1 → 2" {
		t.Errorf("L → N = %q, want 1 → 2", got)
	}
	// Live: another acknowledgement arrives without a reload, on top.
	srv.ackExact(t, manager, peer1)
	b.waitJS(t, 3*time.Second, `document.querySelectorAll('#ack-history tr[data-watcher]').length === 3 && document.querySelector('#ack-history tr[data-watcher]').dataset.target === '`+peer1+`'`)
	b.shots(t, "acks", `document.querySelectorAll('#ack-history tr[data-watcher]').length === 3`)

	// Filter by watcher.
	b.do(t, 5*time.Second, chromedp.SendKeys(chromedp.CSS(`#h-watcher`), opsMain), chromedp.Click(chromedp.CSS(`form[aria-label="Filter the history"] button[type="submit"]`)))
	b.waitJS(t, 5*time.Second, `document.querySelectorAll('#ack-history tr[data-watcher]').length === 1 && location.hash.includes('watcher=')`)
}

// gqlWith runs one GraphQL operation over HTTP with a token and headers of its own.
func (s *server) gqlWith(t *testing.T, token string, header http.Header, query string) {
	t.Helper()
	old := s.token
	s.token = token
	defer func() { s.token = old }()
	s.gqlHeaders(t, header, query, nil, nil)
}

// TestSessionsSortAndTotals: the sessions table sorts by any column (the header's
// buttons, and the select a phone uses), keeps the order in the URL across a reload,
// and totals the rows: sessions, events, pending notices and tokens.
func TestSessionsSortAndTotals(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	twoNotices(t, srv) // manager: notices about worker and peer-1 (2 events each)
	for i := range 5 {
		srv.record(t, map[string]any{"sessionKey": peer2, "kind": "compacted", "actorType": "system", "dedupeKey": fmt.Sprintf("c%d", i)})
	}
	for key, tokens := range map[string]int{worker: 1200, peer1: 56000, peer2: 800} {
		srv.gql(t, `mutation($k: String!, $n: Int) { upsertSession(input: {sessionKey: $k, totalTokens: $n}) { sessionKey } }`, map[string]any{"k": key, "n": tokens}, nil)
	}
	order := func() string {
		return b.str(t, `[...document.querySelectorAll('#sessions-table tbody tr[data-key]')].map((r) => r.dataset.key.split(':').pop()).join(',')`)
	}
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/sessions"), chromedp.WaitVisible(chromedp.CSS(`#sessions-table tbody tr[data-key]`)))
	b.waitJS(t, 10*time.Second, `document.querySelectorAll('#sessions-table tbody tr[data-key]').length === 3 && `+allLive)
	if got := order(); got != "peer-1,peer-2,worker-1" {
		t.Errorf("key order = %q", got)
	}
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`#sessions-table th button[data-sort="version"]`)))
	if got := order(); got != "peer-2,peer-1,worker-1" {
		t.Errorf("by events, most first = %q", got)
	}
	if got := b.str(t, `document.querySelector('#sessions-table th:has(button[data-sort="version"])').getAttribute('aria-sort')`); got != "descending" {
		t.Errorf("aria-sort = %q", got)
	}
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`#sessions-table th button[data-sort="tokens"]`)))
	if got := order(); got != "peer-1,worker-1,peer-2" {
		t.Errorf("by tokens = %q", got)
	}
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`#sessions-table th button[data-sort="tokens"]`))) // reversed
	if got := order(); got != "peer-2,worker-1,peer-1" {
		t.Errorf("by tokens, reversed = %q", got)
	}
	foot := `#sessions-table tfoot tr[data-totals]`
	for field, want := range map[string]string{"totalEvents": "9", "totalPending": "2", "totalTokens": "58000"} {
		if got := b.str(t, `document.querySelector('`+foot+` [data-`+kebab(field)+`]').dataset.`+field); got != want {
			t.Errorf("total %s = %q, want %s", field, got, want)
		}
	}
	if got := b.text(t, foot+` th`); got != "Total · 3 sessions" {
		t.Errorf("totals label = %q", got)
	}
	// Pending follows the feed: an acknowledgement elsewhere lowers the total.
	srv.ackExact(t, manager, worker)
	b.waitJS(t, 3*time.Second, `document.querySelector('`+foot+` [data-total-pending]').dataset.totalPending === '1'`)
	b.do(t, 10*time.Second, chromedp.Reload())
	b.waitJS(t, 10*time.Second, `document.querySelectorAll('#sessions-table tbody tr[data-key]').length === 3`)
	if got := order(); got != "peer-2,worker-1,peer-1" {
		t.Errorf("after a reload the order is %q, want it kept", got)
	}
	b.shots(t, "sessions-sorted", `document.querySelectorAll('#sessions-table tbody tr[data-key]').length === 3`)
	// At phone width the header is hidden: the select sorts.
	b.do(t, 10*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.do(t, 5*time.Second, chromedp.SetValue(chromedp.CSS(`#sort-by`), "pending"),
		evalJS(`document.querySelector('#sort-by').dispatchEvent(new Event('change'))`))
	if got := order(); !strings.HasPrefix(got, "peer-1,") {
		t.Errorf("by pending (phone) = %q, want peer-1 first", got)
	}
	b.do(t, 10*time.Second, chromedp.EmulateViewport(1280, 860))
}

// kebab turns totalEvents into total-events (a data attribute's name).
func kebab(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('-')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestActivityChartTimeRange: the chart's range selects the window (15 min to 24 h):
// an event three hours ago is outside the hour and inside six hours, where bars are 5
// minutes wide; the choice is kept across a reload.
func TestActivityChartTimeRange(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	ago := func(d time.Duration) string { return time.Now().Add(-d).UTC().Format(time.RFC3339Nano) }
	for _, in := range []map[string]any{
		{"sessionKey": worker, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "occurredAt": ago(3 * time.Hour)},
		{"sessionKey": worker, "kind": "run_failed", "actorType": "system", "outcome": "error", "occurredAt": ago(3*time.Hour + time.Minute)},
		{"sessionKey": worker, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "occurredAt": ago(20 * time.Minute)},
		{"sessionKey": peer1, "kind": "goal_changed", "actorType": "human", "actorId": "telegram:ana", "occurredAt": ago(10 * time.Hour)},
	} {
		srv.record(t, in)
	}
	total := func(kind string) int {
		return int(b.eval(t, `[...document.querySelectorAll('#activity-chart rect.bar[data-kind="`+kind+`"]')].reduce((a, r) => a + Number(r.dataset.count), 0)`))
	}
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#activity-chart svg.chart`)))
	if total("child_spawned") != 0 || total("human_direct_message") != 1 {
		t.Errorf("last hour: child_spawned %d, human %d; want 0 and 1", total("child_spawned"), total("human_direct_message"))
	}
	pick := func(id string) {
		t.Helper()
		b.do(t, 5*time.Second, chromedp.SetValue(chromedp.CSS(`#chart-range`), id),
			evalJS(`document.querySelector('#chart-range').dispatchEvent(new Event('change'))`))
		b.waitJS(t, 5*time.Second, `document.querySelector('#activity-chart').dataset.drawn === '`+id+`' && document.querySelector('#activity-chart').dataset.freshness === 'live'`)
	}
	pick("6h")
	b.waitJS(t, 5*time.Second, `[...document.querySelectorAll('#activity-chart rect.bar[data-kind="child_spawned"]')].length === 1`)
	if total("child_spawned") != 1 || total("run_failed") != 1 || total("goal_changed") != 0 {
		t.Errorf("6 hours: child_spawned %d, run_failed %d, goal_changed %d; want 1 1 0", total("child_spawned"), total("run_failed"), total("goal_changed"))
	}
	// Five-minute bars: 72 columns; the two events three hours ago are one or two
	// columns, the human message another.
	if n := b.eval(t, `new Set([...document.querySelectorAll('#activity-chart rect.bar')].map((r) => r.getAttribute('x'))).size`); n < 2 || n > 3 {
		t.Errorf("6 hours: bars in %v columns, want 2 or 3", n)
	}
	if hint := b.text(t, `#activity-chart .chart-tools .hint`); !strings.Contains(hint, "per 5 min") {
		t.Errorf("hint = %q", hint)
	}
	b.shots(t, "chart-range", `!!document.querySelector('#activity-chart svg.chart')`)
	pick("24h")
	if total("goal_changed") != 1 {
		t.Errorf("24 hours: goal_changed %d, want 1", total("goal_changed"))
	}
	pick("15m")
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#activity-chart [data-chart-empty]')`)
	if got := b.text(t, `#activity-chart [data-chart-empty]`); !strings.Contains(got, "last 15 min") {
		t.Errorf("empty text = %q", got)
	}
	pick("6h")
	b.do(t, 10*time.Second, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#activity-chart svg.chart`)))
	if got := b.str(t, `document.querySelector('#chart-range').value`); got != "6h" {
		t.Errorf("after a reload the range is %q, want 6h", got)
	}
}

// TestKeyboardShortcuts: j and k move the focus through the notice cards, a
// acknowledges the current one (and the focus moves on), ? opens the help (Escape
// closes it), g then a letter goes to a view, and typing in a field is left alone.
func TestKeyboardShortcuts(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	twoNotices(t, srv)
	spawnAndChange(t, srv, manager, peer2)
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"))
	b.waitJS(t, 10*time.Second, `document.querySelectorAll('#notice-list .notice').length === 3`)
	b.do(t, 5*time.Second, evalJS(`document.activeElement.blur()`))
	focused := func() string {
		return b.str(t, `document.activeElement && document.activeElement.closest('.notice') ? document.activeElement.closest('.notice').dataset.target : ''`)
	}
	targets := b.str(t, `[...document.querySelectorAll('#notice-list .notice')].map((c) => c.dataset.target).join(',')`)
	list := strings.Split(targets, ",")
	press := func(keys string) {
		t.Helper()
		b.do(t, 5*time.Second, chromedp.KeyEvent(keys))
	}
	press("j")
	if got := focused(); got != list[0] {
		t.Errorf("j: focus on %q, want %q", got, list[0])
	}
	press("j")
	press("j")
	press("j") // stays on the last
	if got := focused(); got != list[2] {
		t.Errorf("j×4: focus on %q, want the last %q", got, list[2])
	}
	press("k")
	if got := focused(); got != list[1] {
		t.Errorf("k: focus on %q, want %q", got, list[1])
	}
	press("a")
	b.waitJS(t, 5*time.Second, `document.querySelectorAll('#notice-list .notice').length === 2 && !document.querySelector('#notice-list .notice[data-target="`+list[1]+`"]')`)
	b.waitJS(t, 2*time.Second, `!!document.activeElement.closest('#notice-list .notice')`)
	if n := srv.pending(t, manager); n != 2 {
		t.Errorf("pending after a acknowledged one = %d, want 2", n)
	}
	// Typing in the filter is left alone: "a" goes into the field.
	b.do(t, 5*time.Second, chromedp.Focus(chromedp.CSS(`#notice-filter`)), chromedp.KeyEvent("a"))
	if got := b.str(t, `document.querySelector('#notice-filter').value`); got != "a" || b.count(t, `#notice-list .notice`) != 2 {
		t.Errorf("typing a in the filter: value %q, %d notices", got, b.count(t, `#notice-list .notice`))
	}
	b.do(t, 5*time.Second, evalJS(`document.querySelector('#notice-filter').value = ''; document.querySelector('#notice-filter').dispatchEvent(new Event('input')); document.activeElement.blur()`))
	press("?")
	b.waitJS(t, 2*time.Second, `!!document.querySelector('#keys-dialog[open]')`)
	if n := b.count(t, `#keys-dialog kbd`); n < 10 {
		t.Errorf("the help lists %d keys", n)
	}
	b.shots(t, "keys", `!!document.querySelector('#keys-dialog[open]')`)
	press(kb.Escape)
	b.waitJS(t, 2*time.Second, `!document.querySelector('#keys-dialog[open]')`)
	press("g")
	press("t")
	b.waitJS(t, 2*time.Second, `location.hash === '#/tree'`)
	press("g")
	press("w")
	b.waitJS(t, 2*time.Second, `location.hash === '#/stale' && !!document.querySelector('#stale-watchers tr[data-watcher]')`)
	// Who is stale has Reconcile links; j and k still move through notices where there
	// are cards, and r opens a card's Reconcile.
	press("g")
	press("n")
	b.waitJS(t, 5*time.Second, `document.querySelectorAll('#notice-list .notice').length === 2`)
	b.do(t, 5*time.Second, evalJS(`document.activeElement.blur()`))
	press("j")
	first := focused()
	press("r")
	b.waitJS(t, 5*time.Second, `location.hash.startsWith('#/session/main/') && location.hash.includes(`+strconv.Quote(first)+`) && location.hash.includes('since=')`)
}
