package graph_test

import (
	"fmt"
	"strings"
)

// hostileDoc is one document of the abuse reports: small requests that once
// cost seconds of CPU or did far more work than their size suggests.
type hostileDoc struct {
	name  string
	query string
}

// doublingFragments returns `{ ...F<n> }` where F<i> spreads F<i-1> twice: n+1
// fragments whose expansion has 2^n fields.
func doublingFragments(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "query { ...F%d }\nfragment F0 on Query { __typename }\n", n)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "fragment F%d on Query { ...F%d ...F%d }\n", i, i-1, i-1)
	}
	return b.String()
}

// hostileDocs are the regression documents: each must be refused with a code before
// any resolver runs.
func hostileDocs() []hostileDoc {
	var status, record strings.Builder
	status.WriteString("query {")
	for i := range 300 {
		fmt.Fprintf(&status, ` s%d: sessionStatus(sessionKey: "agent:main:main", changesSince: 0, limit: 200) { stateChanges { events { summary } } }`, i)
	}
	status.WriteString(" }")
	record.WriteString("mutation {")
	for i := range 200 {
		fmt.Fprintf(&record, ` r%d: recordEvent(input: {sessionKey: "agent:main:subagent:flood", kind: human_direct_message, actorType: human}) { recorded }`, i)
	}
	record.WriteString(" }")
	return []hostileDoc{
		{"aliased activity(1440) ×1000", aliasedActivity(1000, "")},
		{"aliased activity ×500, windows 1..500", aliasedActivity(500, "varied")},
		{"fragment doubling (22)", doublingFragments(22)},
		{"__typename ×14000", "{" + strings.Repeat(" __typename", 14000) + " }"},
		{"identical sessionStatus ×1600", "{" + strings.Repeat(` sessionStatus(sessionKey: "agent:main:main") { stateVersion }`, 1600) + " }"},
		{"fragment doubling (23)", doublingFragments(23)},
		{"aliased sessionStatus(limit:200) ×300", status.String()},
		{"aliased recordEvent ×200", record.String()},
	}
}

// aliasedActivity is n aliased activity fields: each over the last day, or (varied)
// each over a window of its own, 1 to n minutes, so that no two are alike.
func aliasedActivity(n int, varied string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		minutes := 1440
		if varied != "" {
			minutes = i%1440 + 1
		}
		fmt.Fprintf(&b, " a%d: activity(sinceMinutes: %d) { count }", i, minutes)
	}
	return b.String() + " }"
}
