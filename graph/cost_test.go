package graph_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql/introspection"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/internal/awareness"
)

// selections counts the selections written in a document (no expansion).
func selections(doc *ast.QueryDocument) int {
	var count func(ast.SelectionSet) int
	count = func(set ast.SelectionSet) int {
		n := 0
		for _, sel := range set {
			n++
			switch s := sel.(type) {
			case *ast.Field:
				n += count(s.SelectionSet)
			case *ast.InlineFragment:
				n += count(s.SelectionSet)
			}
		}
		return n
	}
	n := 0
	for _, op := range doc.Operations {
		n += count(op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		n += count(f.SelectionSet)
	}
	return n
}

func mustParse(tb testing.TB, q string) *ast.QueryDocument {
	tb.Helper()
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: q}, graph.ParserTokenLimit)
	if err != nil {
		tb.Fatalf("parse: %v", err)
	}
	return doc
}

// TestHostileDocumentsRefused: each document of the abuse reports is refused with
// COMPLEXITY_LIMIT_EXCEEDED before gqlgen validates it (or, for the aliased reads and
// appends, before a resolver runs), writes nothing, and the check's work is bounded by
// the document's own size: no expansion (ERR-4). The measures are counts, never times.
func TestHostileDocumentsRefused(t *testing.T) {
	e := newHandlerEnv(t)
	ctx := context.Background()
	for _, d := range hostileDocs() {
		t.Run(d.name, func(t *testing.T) {
			doc := mustParse(t, d.query)
			work, _ := graph.CheckDocument(ctx, doc)
			if limit := selections(doc) + graph.MaxExpandedSelections; work > limit {
				t.Errorf("CheckDocument did %d units of work, want at most %d (the document's %d selections + MaxExpandedSelections)", work, limit, selections(doc))
			}
			before, err := e.store.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(map[string]any{"query": d.query})
			_, r := e.do(t, body)
			if r.code() != "COMPLEXITY_LIMIT_EXCEEDED" || string(r.Data) != "null" && len(r.Data) != 0 {
				t.Fatalf("code %q, data %s, errors %+v; want COMPLEXITY_LIMIT_EXCEEDED and no data", r.code(), r.Data, r.Errors)
			}
			after, err := e.store.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !sameCounts(before, after) {
				t.Errorf("a refused document wrote: %+v → %+v", before, after)
			}
			// The refusal allocates in proportion to the document (parsing it), not to
			// its expansion: 2^23 fields would be millions of allocations.
			allocs := testing.AllocsPerRun(2, func() { e.do(t, body) })
			if limit := float64(len(d.query)); allocs > limit {
				t.Errorf("%.0f allocations to refuse a %d-byte document, want at most one per byte", allocs, len(d.query))
			}
		})
	}
}

// TestDocumentLimitsBoundaries: the limits refuse one past the limit and accept the
// limit itself, so legitimate documents (introspection included) keep working.
func TestDocumentLimitsBoundaries(t *testing.T) {
	t.Parallel()
	e := newHandlerEnv(t)
	query := func(q string) gqlResponse {
		body, _ := json.Marshal(map[string]any{"query": q})
		_, r := e.do(t, body)
		return r
	}
	aliases := func(n int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, " a%d: __typename", i)
		}
		return b.String() + " }"
	}
	identical := func(n int) string { return "{" + strings.Repeat(" __typename", n) + " }" }
	tests := []struct {
		name  string
		query string
		code  string
	}{
		{"introspection", introspection.Query, ""},
		{"MaxExpandedSelections distinct fields", aliases(graph.MaxExpandedSelections), ""},
		{"one selection more", aliases(graph.MaxExpandedSelections + 1), "COMPLEXITY_LIMIT_EXCEEDED"},
		{"MaxIdenticalFields identical fields", identical(graph.MaxIdenticalFields), ""},
		{"one identical field more", identical(graph.MaxIdenticalFields + 1), "COMPLEXITY_LIMIT_EXCEEDED"},
		{"identical fields through fragments", "{ ...A ...B } fragment A on Query {" + strings.Repeat(" __typename", 11) + " } fragment B on Query {" + strings.Repeat(" __typename", 10) + " }", "COMPLEXITY_LIMIT_EXCEEDED"},
		{"identical fields nested", `{ sessionStatus(sessionKey: "agent:main:main") {` + strings.Repeat(" stateVersion", graph.MaxIdenticalFields+1) + " } }", "COMPLEXITY_LIMIT_EXCEEDED"},
		{"doubling fragments within the limit", doublingFragments(4), ""},
		{"spreads of unknown fragments count", doublingFragments(30)[:0] + unknownDoubling(30), "COMPLEXITY_LIMIT_EXCEEDED"},
		{"a fragment cycle is gqlparser's to refuse", "{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }", "GRAPHQL_VALIDATION_FAILED"},
	}
	for _, tc := range tests {
		if r := query(tc.query); r.code() != tc.code {
			t.Errorf("%s: code %q (%+v), want %q", tc.name, r.code(), r.Errors, tc.code)
		}
	}
	doc := mustParse(t, introspection.Query)
	if work, err := graph.CheckDocument(context.Background(), doc); err != nil || work > 2*selections(doc)+graph.MaxExpandedSelections {
		t.Errorf("introspection: work %d, err %v", work, err)
	}
}

// unknownDoubling is doublingFragments whose last fragment spreads an unknown one: no
// field at all, 2^n spreads once expanded.
func unknownDoubling(n int) string {
	return strings.Replace(doublingFragments(n), "fragment F0 on Query { __typename }", "fragment F0 on Query { ...Missing }", 1)
}

// TestCostBudget: list fields weigh by the elements they may return (limit, first),
// mutations are counted, and a refused request writes nothing (ERR-4, ERR-2).
func TestCostBudget(t *testing.T) {
	t.Parallel()
	e := newHandlerEnv(t)
	ctx := context.Background()
	query := func(q string) gqlResponse {
		body, _ := json.Marshal(map[string]any{"query": q})
		_, r := e.do(t, body)
		return r
	}
	// sessionsList(first: 500) { sessions { 40 fields } }: 1 + 1 + 500 × 40 > budget.
	wide := "{ sessionsList(first: 500) { sessions {" + strings.Repeat(" sessionKey agentId kind updatedAt", 10) + " } } }"
	if r := query(wide); r.code() != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Errorf("500 sessions × 40 fields: code %q, want COMPLEXITY_LIMIT_EXCEEDED", r.code())
	}
	narrow := strings.Replace(wide, "first: 500", "first: 50", 1)
	if r := query(narrow); len(r.Errors) > 0 {
		t.Errorf("50 sessions × 40 fields: %+v, want accepted", r.Errors)
	}
	mutations := func(n int) string {
		var b strings.Builder
		b.WriteString("mutation {")
		for i := range n {
			fmt.Fprintf(&b, ` r%d: recordEvent(input: {sessionKey: "agent:main:subagent:c%d", kind: goal_changed, actorType: agent}) { recorded }`, i, i)
		}
		return b.String() + " }"
	}
	before, _ := e.store.Stats(ctx)
	if r := query(mutations(graph.MaxMutationFields + 1)); r.code() != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Errorf("%d mutations: code %q, want COMPLEXITY_LIMIT_EXCEEDED", graph.MaxMutationFields+1, r.code())
	}
	if after, _ := e.store.Stats(ctx); !sameCounts(after, before) {
		t.Errorf("a refused batch wrote: %+v → %+v", before, after)
	}
	if r := query(mutations(graph.MaxMutationFields)); len(r.Errors) > 0 {
		t.Errorf("%d mutations: %+v, want accepted", graph.MaxMutationFields, r.Errors)
	}
	// The cost of the aliased reads of the report, by the stated model.
	var aliased string
	for _, d := range hostileDocs() {
		if strings.HasPrefix(d.name, "aliased sessionStatus") {
			aliased = d.query
		}
	}
	doc := mustValidate(t, aliased)
	if got := graph.OperationCost(doc.Operations[0], nil); got != graph.CostBudget+1 {
		t.Errorf("aliased sessionStatus ×300: cost %d, want saturated at %d", got, graph.CostBudget+1)
	}
	one := mustValidate(t, `{ sessionStatus(sessionKey: "k", limit: 10) { stateVersion stateChanges { events { sequence summary } } } }`)
	// sessionStatus 1 + stateVersion 1 + stateChanges (1 + events (1 + 10 × 2)).
	if got, want := graph.OperationCost(one.Operations[0], nil), 1+1+1+1+10*2; got != want {
		t.Errorf("cost = %d, want %d", got, want)
	}
}

// TestCostByWhatFieldsRead_ERR4: a field is priced by what it reads besides what it
// returns: activity scans its window of the log (half a request's budget: one per
// request, however small its window or selection), sessionStatus its limit of events
// once changesSince asks for them, sessionsList its first rows. The dashboard's
// queries stay well within the budget.
func TestCostByWhatFieldsRead_ERR4(t *testing.T) {
	t.Parallel()
	cost := func(q string, vars map[string]any) int {
		t.Helper()
		return graph.OperationCost(mustValidate(t, q).Operations[0], vars)
	}
	for _, tc := range []struct {
		q    string
		vars map[string]any
		want int
	}{
		// activity 1 + its read + a bucket per minute × (minute kind count).
		{`{ activity(sinceMinutes: 1440) { minute kind count } }`, nil, 1 + graph.ActivityReadCost + 1440*3},
		{`{ activity { count } }`, nil, 1 + graph.ActivityReadCost + 60},
		{`query($m: Int) { activity(sinceMinutes: $m) { count } }`, map[string]any{"m": 5}, 1 + graph.ActivityReadCost + 5},
		// noticeActivity is counted in memory: its buckets only.
		{`{ noticeActivity(sinceMinutes: 30) { opened } }`, nil, 1 + 30},
		// sessionStatus reads its limit of events only with changesSince.
		{`{ sessionStatus(sessionKey: "k", limit: 10) { stateVersion } }`, nil, 1 + 1},
		{`{ sessionStatus(sessionKey: "k", changesSince: 0, limit: 10) { stateVersion } }`, nil, 1 + 10 + 1},
		{`query($c: Int) { sessionStatus(sessionKey: "k", changesSince: $c) { stateVersion } }`, map[string]any{"c": nil}, 1 + 1},
		{`{ sessionStatus(sessionKey: "k", changesSince: 3) { stateChanges { events { sequence } } } }`, nil, 1 + 200 + 1 + 1 + 200},
		// sessionsList reads its first rows.
		{`{ sessionsList(first: 20) { sessions { sessionKey } } }`, nil, 1 + 20 + 1 + 20},
		// recordEvents returns one element per input.
		{`mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) { index } }`, map[string]any{"ins": []any{map[string]any{}, map[string]any{}, map[string]any{}}}, 1 + 3},
		// skippedWatchers holds at most the watchers an input names: the most of any
		// input of the call.
		{`mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) { result { skippedWatchers { watcher reason } } } }`,
			map[string]any{"ins": []any{map[string]any{"watchers": []any{"a"}}, map[string]any{"watchers": []any{"a", "b", "c"}}}}, 1 + 2*(1+1+3*2)},
		{`mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) { result { skippedWatchers { watcher } } } }`,
			map[string]any{"ins": []any{map[string]any{}}}, 1 + (1 + 1 + 1*1)},
		{`mutation($in: RecordEventInput!) { recordEvent(input: $in) { skippedWatchers { watcher } } }`,
			map[string]any{"in": map[string]any{"watchers": []any{"a", "b"}}}, 1 + 1 + 2*1},
		{`mutation { recordEvent(input: {sessionKey: "k", kind: compacted, actorType: system}) { skippedWatchers { watcher } } }`, nil, 1 + 1 + 1},
		// A stream that resumes replays the log (FEED-1): a full page's read.
		{`subscription { stateEvents(sessionKey: "k") { sequence } }`, nil, 1 + 1},
		{`subscription { stateEvents(sessionKey: "k", afterSequence: 4) { sequence } }`, nil, 1 + 200 + 1},
		{`subscription($a: Int) { s: stateEvents(sessionKey: "k", afterSequence: $a) { sequence } }`, map[string]any{"a": nil}, 1 + 1},
		{`subscription { stateEventFeed(sessionKey: "k", afterSequence: 0) { __typename } }`, nil, 1 + 200 + 1},
		// A notice's digest reads its range of the log (DIG-1), per notice of the list.
		{`query { pendingNotices(watcher: "w") { digest { humanEvents } } }`, nil, 1 + graph.DefaultListCost*(1+graph.DigestReadCost+1)},
		{`subscription { staleNotices(watcher: "w") { digest { byKind { count } } } }`, nil, 1 + (1 + graph.DigestReadCost + (1 + graph.DefaultListCost*1))},
		// ackNotices returns one element per notice named, else DefaultListCost.
		{`mutation { ackNotices(watcher: "w", notices: [{target: "t", notifiedVersion: 1}, {target: "u", notifiedVersion: 2}]) { text } }`, nil, 1 + 2},
		{`mutation { ackNotices(watcher: "w") { text } }`, nil, 1 + graph.DefaultListCost},
	} {
		if got := cost(tc.q, tc.vars); got != tc.want {
			t.Errorf("%s %v: cost %d, want %d", tc.q, tc.vars, got, tc.want)
		}
	}
	if got := cost(`{ a: activity(sinceMinutes: 1) { count } b: activity(sinceMinutes: 1) { count } }`, nil); got <= graph.CostBudget {
		t.Errorf("two activity fields cost %d, within the budget %d", got, graph.CostBudget)
	}
	// The dashboard's chart: activity and noticeActivity of the last hour, at once.
	chart := `query Activity($key: String, $agentId: String) {
      activity(sessionKey: $key, agentId: $agentId, sinceMinutes: 60) { minute kind count }
      noticeActivity(sessionKey: $key, agentId: $agentId, sinceMinutes: 60) { minute opened acknowledged } }`
	if got := cost(chart, nil); got > graph.CostBudget*3/4 {
		t.Errorf("the dashboard's chart costs %d, too close to the budget %d", got, graph.CostBudget)
	}
}

// mustValidate parses and validates q against the schema, as gqlgen does before
// OperationCost runs.
func mustValidate(tb testing.TB, q string) *ast.QueryDocument {
	tb.Helper()
	doc, errs := gqlparser.LoadQueryWithRules(generated.NewExecutableSchema(generated.Config{}).Schema(), q, nil)
	if len(errs) > 0 {
		tb.Fatalf("validate: %v", errs)
	}
	return doc
}

// TestCheckDocumentStopsWhenCancelled: a request that ends stops the check.
func TestCheckDocumentStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var b strings.Builder
	b.WriteString("{")
	for i := range 1500 {
		fmt.Fprintf(&b, " a%d: __typename", i)
	}
	b.WriteString(" }")
	work, err := graph.CheckDocument(ctx, mustParse(t, b.String()))
	if err == nil || err.Extensions["code"] != "UNAVAILABLE" || work > 1024 {
		t.Errorf("cancelled check: work %d, err %v, want UNAVAILABLE after at most 1024 units", work, err)
	}
}

// FuzzDocumentLimits: whatever the document, CheckDocument's work stays within the
// document's selections plus MaxExpandedSelections, and it accepts exactly the
// documents whose expansion (measured naively, with a cap) is within the limits.
func FuzzDocumentLimits(f *testing.F) {
	for _, d := range hostileDocs() {
		if len(d.query) < 2000 {
			f.Add(d.query)
		}
	}
	f.Add(doublingFragments(3))
	f.Add(unknownDoubling(12))
	f.Add("{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }")
	f.Add("{ a: __typename a: __typename ... on Query { a: __typename } }")
	f.Add(`query Q($k: String!) { sessionStatus(sessionKey: $k) { ...S } } fragment S on SessionStatus { stateVersion session { kind } }`)
	f.Fuzz(func(t *testing.T, q string) {
		doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: q}, graph.ParserTokenLimit)
		if err != nil {
			return
		}
		work, gerr := graph.CheckDocument(context.Background(), doc)
		if limit := selections(doc) + graph.MaxExpandedSelections + 1; work > limit {
			t.Fatalf("work %d > %d for %q", work, limit, q)
		}
		size, identical, cyclic := naiveExpansion(doc)
		if cyclic {
			return
		}
		over := size > graph.MaxExpandedSelections || identical > graph.MaxIdenticalFields
		if over != (gerr != nil) {
			t.Fatalf("expanded size %d, most identical %d, but CheckDocument says %v for %q", size, identical, gerr, q)
		}
	})
}

// naiveExpansion expands the document the obvious way, stopping past the limit: the
// expanded selection count, the most fields of one response name in one merged set,
// and whether a fragment spreads itself.
func naiveExpansion(doc *ast.QueryDocument) (size, identical int, cyclic bool) {
	frags := map[string]*ast.FragmentDefinition{}
	for _, f := range doc.Fragments {
		if _, ok := frags[f.Name]; !ok {
			frags[f.Name] = f
		}
	}
	stop := func() bool { return size > graph.MaxExpandedSelections || cyclic }
	var expand func(set ast.SelectionSet, path map[string]bool)
	expand = func(set ast.SelectionSet, path map[string]bool) {
		for _, sel := range set {
			if stop() {
				return
			}
			size++
			switch s := sel.(type) {
			case *ast.Field:
				expand(s.SelectionSet, path)
			case *ast.InlineFragment:
				expand(s.SelectionSet, path)
			case *ast.FragmentSpread:
				if path[s.Name] {
					cyclic = true
					return
				}
				if def := frags[s.Name]; def != nil {
					path[s.Name] = true
					expand(def.SelectionSet, path)
					delete(path, s.Name)
				}
			}
		}
	}
	var merged func(set ast.SelectionSet)
	merged = func(set ast.SelectionSet) {
		var fields []*ast.Field
		var collect func(ast.SelectionSet)
		collect = func(set ast.SelectionSet) {
			for _, sel := range set {
				switch s := sel.(type) {
				case *ast.Field:
					fields = append(fields, s)
				case *ast.InlineFragment:
					collect(s.SelectionSet)
				case *ast.FragmentSpread:
					if def := frags[s.Name]; def != nil {
						collect(def.SelectionSet)
					}
				}
			}
		}
		collect(set)
		counts := map[string]int{}
		for _, f := range fields {
			n := f.Alias
			if n == "" {
				n = f.Name
			}
			counts[n]++
			identical = max(identical, counts[n])
			merged(f.SelectionSet)
		}
	}
	var sets []ast.SelectionSet
	for _, op := range doc.Operations {
		sets = append(sets, op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		sets = append(sets, f.SelectionSet)
	}
	for _, set := range sets {
		expand(set, map[string]bool{})
	}
	if stop() {
		return size, identical, cyclic
	}
	for _, set := range sets {
		merged(set)
	}
	return size, identical, cyclic
}

// sameCounts reports whether two store statistics count the same rows.
func sameCounts(a, b awareness.Stats) bool {
	return a.Sessions == b.Sessions && a.Events == b.Events && a.Cursors == b.Cursors && a.PendingNotices == b.PendingNotices
}
