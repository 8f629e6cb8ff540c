package hook

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/awareness/awareness/client"
)

const pendingQuery = `query HookPending($w: String!) { pendingNotices(watcher: $w) {
 watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt } }`

// Pending returns the watcher's pending notices, oldest first.
func Pending(ctx context.Context, c *client.Client, watcher string) ([]client.Notice, error) {
	var out struct {
		PendingNotices []client.Notice `json:"pendingNotices"`
	}
	if err := c.Do(ctx, pendingQuery, map[string]any{"w": watcher}, &out); err != nil {
		return nil, err
	}
	return out.PendingNotices, nil
}

const (
	acknowledgeMutation = `mutation HookClaim($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) {
 target targetAgentId notifiedVersion outcome } }`
	// ackMutation is the exact form of services without acknowledgeNotices.
	ackMutation = `mutation HookAck($w: String!, $n: [NoticeRef!]!) { ackNotices(watcher: $w, notices: $n) { target } }`
)

// Claim acknowledges exactly the given notices (NTC-3) and returns those this call
// acknowledged. Claude Code and Codex run matching hooks concurrently: a notice that
// another hook of the same watcher acknowledged first, or that was superseded or
// removed meanwhile, is left out, so no two hooks print one notice. The
// acknowledgement comes before the print: a hook whose output the harness takes
// cannot fail between the two, while a print before it would leave the notice
// pending for the next hook when the acknowledgement is lost. On a service without
// acknowledgeNotices it falls back to ackNotices(notices:), which says nothing per
// notice, and returns them all.
func Claim(ctx context.Context, c *client.Client, watcher string, ns []client.Notice) ([]client.Notice, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	refs := make([]map[string]any, len(ns))
	for i, n := range ns {
		refs[i] = map[string]any{"target": n.Target, "targetAgentId": n.TargetAgentID, "notifiedVersion": n.NotifiedVersion}
	}
	vars := map[string]any{"w": watcher, "n": refs}
	var out struct {
		AcknowledgeNotices []struct {
			Target          string `json:"target"`
			TargetAgentID   string `json:"targetAgentId"`
			NotifiedVersion int64  `json:"notifiedVersion"`
			Outcome         string `json:"outcome"`
		} `json:"acknowledgeNotices"`
	}
	err := c.Do(ctx, acknowledgeMutation, vars, &out)
	if client.ErrorCode(err) == "GRAPHQL_VALIDATION_FAILED" {
		if err := c.Do(ctx, ackMutation, vars, nil); err != nil {
			return nil, err
		}
		return ns, nil
	}
	if err != nil {
		return nil, err
	}
	mine := map[string]bool{}
	for _, a := range out.AcknowledgeNotices {
		if a.Outcome == "acknowledged" {
			mine[noticeKey(a.Target, a.TargetAgentID, a.NotifiedVersion)] = true
		}
	}
	var claimed []client.Notice
	for _, n := range ns {
		if mine[noticeKey(n.Target, n.TargetAgentID, n.NotifiedVersion)] {
			claimed = append(claimed, n)
		}
	}
	return claimed, nil
}

func noticeKey(target, agent string, n int64) string {
	return agent + "\x00" + target + "\x00" + strconv.FormatInt(n, 10)
}

// header is the first line of every text a hook prints: what the lines below are.
const header = "[awareness] Another actor changed sessions this session depends on. Reconcile each before acting on it:"

// digestReserve is room kept for the digest line.
const digestReserve = 200

// Fit returns how many of ns, from the first, Render can print within limit
// characters, the digest line included when some are left out. At least one always
// fits: a notice's text is at most a few hundred characters.
func Fit(ns []client.Notice, limit int) int {
	size := len(header)
	for i, n := range ns {
		size += 1 + len(n.Text)
		reserve := 0
		if i < len(ns)-1 {
			reserve = digestReserve
		}
		if size+reserve > limit && i > 0 {
			return i
		}
	}
	return len(ns)
}

// Render is the text a hook prints for the notices it claimed: the header, then each
// notice's exact text (NTC-1) on a line of its own, then, when more are pending than
// fit, a digest line with their number.
func Render(claimed []client.Notice, more int) string {
	var b strings.Builder
	b.WriteString(header)
	for _, n := range claimed {
		b.WriteByte('\n')
		b.WriteString(n.Text)
	}
	if more > 0 {
		noun := "notices are"
		if more == 1 {
			noun = "notice is"
		}
		fmt.Fprintf(&b, "\n[awareness] %d more stale-session %s pending and will be shown next; or list them with pending_notices.", more, noun)
	}
	return b.String()
}
