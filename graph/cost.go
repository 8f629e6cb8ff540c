package graph

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/awareness/awareness/graph/resolvers"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/jsontext"
)

// The work budget of one request (ERR-4). A request over any of them is refused with
// COMPLEXITY_LIMIT_EXCEEDED before a resolver runs. What a request costs is also
// drawn from its caller's budget (internal/budget): its operation's cost in query
// points, its writes, and the parsing of a document seen for the first time.
const (
	// MaxExpandedSelections bounds the selections of a document, fields, fragment
	// spreads and inline fragments, once every fragment spread is replaced by its
	// fragment: the operations and every fragment definition, each expanded on its
	// own, summed. gqlparser's validation and the cost walk below do work
	// proportional to this number; GraphiQL's introspection query,
	// introspection.Query, counts 484.
	MaxExpandedSelections = 2000
	// MaxIdenticalFields bounds the fields of one response name in one selection
	// set, fragments merged in. gqlparser's OverlappingFieldsCanBeMerged compares them
	// pairwise: its work is quadratic in this number.
	MaxIdenticalFields = 20
	// CostBudget bounds an operation's cost: every field costs 1 plus what it reads,
	// and the fields under a list cost once per element the list may hold; see
	// OperationCost. A point is about a microsecond of the service's CPU.
	CostBudget = 20000
	// MaxMutationFields bounds the mutation fields of one request, aliases included:
	// at most this many appends or watches per request.
	MaxMutationFields = 10
	// DefaultListCost is the element count assumed for a list with no size argument,
	// such as pendingNotices, watches, upstreamLinks, or ackNotices without notices.
	DefaultListCost = 10
	// ActivityReadCost is what an activity field reads: it counts every event of its
	// scope in its window, which may be the whole log, --max-rows or 50,000 by
	// default: 20–50 ms of CPU on SQLite. So it is priced at half of CostBudget: one
	// per request.
	ActivityReadCost = CostBudget / 2
	// DigestReadCost is what a notice's digest reads (DIG-1): one indexed range read
	// of the target's log after L up to N, counted by kind and actor type in the
	// database. A range is usually a few events; 200 points covers counting a few
	// thousand rows, and a list of notices pays it per notice it may hold.
	DigestReadCost = 200
	// ParseBytesPerPoint prices parsing and validating a document the query cache
	// does not hold: a point per this many bytes.
	ParseBytesPerPoint = 64
)

func complexityError(format string, args ...any) *gqlerror.Error {
	err := gqlerror.Errorf(format, args...)
	errcode.Set(err, awareness.ECOMPLEXITY)
	return err
}

// DocumentLimits is a gqlgen extension that bounds the work of parsing and validating a
// document before gqlgen does either (ERR-4). gqlparser's validation costs grow with
// the document after fragment expansion, where n+1 tiny doubling fragments give 2^n
// fields, and quadratically with identical fields in one selection set, as in
// `{ __typename × 14000 }`; both were seconds of CPU from a kilobyte. As an
// OperationParameterMutator it runs before gqlgen's parse and validation: it parses
// the document itself, linearly and bounded by TokenLimit, and checks it with
// CheckDocument, whose work is linear in the document. A document found in Cache,
// gqlgen's query cache, passed validation and was checked already.
//
// A document not in Cache is refused when a string literal escapes a lone UTF-16
// surrogate: jsontext.ValidDocument, the rule request JSON meets (ERR-3). It then
// costs its caller ParsePoints of Budget for the parsing and validation it asks for;
// a caller out of points gets RATE_LIMITED.
type DocumentLimits struct {
	// TokenLimit is gqlgen's ParserTokenLimit.
	TokenLimit int
	// Cache is gqlgen's query cache; nil checks every document.
	Cache graphql.Cache[*ast.QueryDocument]
	// Budget is charged for the parsing; nil charges nothing.
	Budget *budget.Budget
}

// ParsePoints is what parsing and validating a document of n bytes costs.
func ParsePoints(n int) int { return 1 + n/ParseBytesPerPoint }

var (
	_ graphql.HandlerExtension          = DocumentLimits{}
	_ graphql.OperationParameterMutator = DocumentLimits{}
	_ graphql.HandlerExtension          = CostLimit{}
	_ graphql.OperationContextMutator   = CostLimit{}
)

// ExtensionName implements graphql.HandlerExtension.
func (DocumentLimits) ExtensionName() string { return "DocumentLimits" }

// Validate implements graphql.HandlerExtension.
func (DocumentLimits) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationParameters implements graphql.OperationParameterMutator. A document
// that does not parse is left to gqlgen, which reports the parse error.
func (l DocumentLimits) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	if params.Query == "" {
		return nil
	}
	if l.Cache != nil {
		if _, ok := l.Cache.Get(ctx, params.Query); ok {
			return nil
		}
	}
	if !jsontext.ValidDocument(params.Query) {
		err := gqlerror.Errorf("%s", jsontext.Message)
		errcode.Set(err, awareness.EINVALID)
		return err
	}
	if err := l.Budget.Charge(budget.CallerOf(ctx), budget.Cost{Points: ParsePoints(len(params.Query))}); err != nil {
		return budgetError(err)
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: params.Query}, l.TokenLimit)
	if err != nil {
		return nil
	}
	_, gerr := CheckDocument(ctx, doc)
	return gerr
}

// CheckDocument checks a parsed document against MaxExpandedSelections and
// MaxIdenticalFields without expanding it first: each fragment's expanded size is
// memoized, so that pass visits each selection of the document once; only a
// document within MaxExpandedSelections is then expanded, to count identical fields.
// work counts the selections visited, at most the document's selections plus
// MaxExpandedSelections: the deterministic measure the tests bound. It stops with
// UNAVAILABLE when ctx ends.
func CheckDocument(ctx context.Context, doc *ast.QueryDocument) (work int, _ *gqlerror.Error) {
	c := &docCheck{ctx: ctx, frags: map[string]*ast.FragmentDefinition{}, size: map[string]int{}}
	for _, f := range doc.Fragments {
		if _, dup := c.frags[f.Name]; !dup {
			c.frags[f.Name] = f
		}
	}
	total := 0
	sets := make([]ast.SelectionSet, 0, len(doc.Operations)+len(doc.Fragments))
	for _, op := range doc.Operations {
		sets = append(sets, op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		sets = append(sets, f.SelectionSet)
	}
	for _, set := range sets {
		total = min(total+c.setSize(set), MaxExpandedSelections+1)
		if c.err != nil {
			return c.work, c.err
		}
	}
	if total > MaxExpandedSelections {
		return c.work, complexityError("the document has more than %d selections once its fragments are expanded (each operation and fragment definition on its own, summed): ask for fewer fields or split the request", MaxExpandedSelections)
	}
	if c.cyclic {
		// gqlparser's NoFragmentCycles refuses the cycle; expanding it here would not end.
		return c.work, nil
	}
	for _, set := range sets {
		c.identical(set)
		if c.err != nil {
			return c.work, c.err
		}
	}
	return c.work, nil
}

// docCheck is the state of one CheckDocument.
type docCheck struct {
	ctx   context.Context
	frags map[string]*ast.FragmentDefinition
	// size is the expanded size of each fragment measured so far; -1 while it is
	// being measured, so a cycle meets it and counts 0.
	size   map[string]int
	cyclic bool
	work   int
	err    *gqlerror.Error
}

// tick counts one unit of work and checks ctx every 1024 units.
func (c *docCheck) tick() bool {
	c.work++
	if c.err == nil && c.work&1023 == 0 && c.ctx.Err() != nil {
		c.err = gqlerror.Errorf("the request ended while its document was being checked")
		errcode.Set(c.err, awareness.EUNAVAILABLE)
	}
	return c.err == nil
}

// setSize returns the expanded selection count of set, saturated at
// MaxExpandedSelections+1. A spread counts 1 besides its fragment, so that spreads of
// empty or unknown fragments still count.
func (c *docCheck) setSize(set ast.SelectionSet) int {
	n := 0
	for _, sel := range set {
		if !c.tick() {
			return 0
		}
		switch s := sel.(type) {
		case *ast.Field:
			n += 1 + c.setSize(s.SelectionSet)
		case *ast.InlineFragment:
			n += 1 + c.setSize(s.SelectionSet)
		case *ast.FragmentSpread:
			n += 1 + c.fragSize(s.Name)
		}
		if n > MaxExpandedSelections {
			return MaxExpandedSelections + 1
		}
	}
	return n
}

func (c *docCheck) fragSize(name string) int {
	if v, ok := c.size[name]; ok {
		if v < 0 {
			c.cyclic = true
			return 0
		}
		return v
	}
	def := c.frags[name]
	if def == nil {
		return 0 // gqlparser refuses the unknown fragment
	}
	c.size[name] = -1
	v := c.setSize(def.SelectionSet)
	c.size[name] = v
	return v
}

// identical refuses a selection set with more than MaxIdenticalFields fields of one
// response name, in set and in every set below it, merging fragments in as
// OverlappingFieldsCanBeMerged does. It expands fragments, so it runs only on
// documents whose expanded size is bounded and that have no cycle.
func (c *docCheck) identical(set ast.SelectionSet) {
	var fields []*ast.Field
	c.collect(set, &fields)
	counts := make(map[string]int, len(fields))
	for _, f := range fields {
		name := f.Alias
		if name == "" {
			name = f.Name
		}
		counts[name]++
		if counts[name] > MaxIdenticalFields && c.err == nil {
			c.err = complexityError("the selection set has more than %d fields named %q (fragments merged in); the limit is %d", MaxIdenticalFields, truncateName(name), MaxIdenticalFields)
		}
	}
	for _, f := range fields {
		if c.err != nil {
			return
		}
		if len(f.SelectionSet) > 0 {
			c.identical(f.SelectionSet)
		}
	}
}

func (c *docCheck) collect(set ast.SelectionSet, into *[]*ast.Field) {
	for _, sel := range set {
		if !c.tick() {
			return
		}
		switch s := sel.(type) {
		case *ast.Field:
			*into = append(*into, s)
		case *ast.InlineFragment:
			c.collect(s.SelectionSet, into)
		case *ast.FragmentSpread:
			if def := c.frags[s.Name]; def != nil {
				c.collect(def.SelectionSet, into)
			}
		}
	}
}

func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// CostLimit is a gqlgen extension that refuses an operation costing more than
// CostBudget, or with more than MaxMutationFields mutation fields, after validation
// and before execution (ERR-4), then charges the operation's cost in query points and
// its OperationWrites to its caller's Budget. It replaces gqlgen's complexity limit,
// which counts every field 1 whatever it reads and its list size, and expands
// fragments without memoizing; DocumentLimits bounded the document first, so the
// walk here is bounded too.
type CostLimit struct {
	// Budget is charged; nil charges nothing.
	Budget *budget.Budget
}

// ExtensionName implements graphql.HandlerExtension.
func (CostLimit) ExtensionName() string { return "CostLimit" }

// Validate implements graphql.HandlerExtension.
func (CostLimit) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext implements graphql.OperationContextMutator.
func (l CostLimit) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	if oc.Operation.Operation == ast.Mutation {
		if n := len(graphql.CollectFields(oc, oc.Operation.SelectionSet, []string{"Mutation"})); n > MaxMutationFields {
			return complexityError("the request has %d mutation fields; at most %d are allowed per request: send the rest in further requests", n, MaxMutationFields)
		}
	}
	cost := OperationCost(oc.Operation, oc.Variables)
	if cost > CostBudget {
		return complexityError("the operation costs more than %d (every field 1 plus what it reads, times the elements a list may hold: limit, first, sinceMinutes, the inputs given, or %d); the budget is %d: ask for fewer fields, a smaller limit, first or window", CostBudget, DefaultListCost, CostBudget)
	}
	if err := l.Budget.Charge(budget.CallerOf(ctx), budget.Cost{Points: cost, Writes: OperationWrites(oc)}); err != nil {
		return budgetError(err)
	}
	return nil
}

// OperationWrites is what an operation takes from its caller's writes: a mutation
// one per field, except recordEvents, one per input; a subscription 1; a query 0.
func OperationWrites(oc *graphql.OperationContext) int {
	switch oc.Operation.Operation {
	case ast.Subscription:
		return 1
	case ast.Mutation:
		n := 0
		for _, f := range graphql.CollectFields(oc, oc.Operation.SelectionSet, []string{"Mutation"}) {
			if f.Name == "recordEvents" {
				n += max(listLen(f.Field, oc.Variables, "inputs"), 1)
				continue
			}
			n++
		}
		return n
	}
	return 0
}

// budgetError is the GraphQL error of a budget refusal.
func budgetError(err error) *gqlerror.Error {
	if e, ok := errors.AsType[*budget.Exceeded](err); ok {
		return resolvers.BudgetError(e)
	}
	return gqlerror.Wrap(err)
}

// OperationCost is the cost of a validated operation, saturated at CostBudget+1: every
// field costs 1, plus what it reads, plus its selections' cost times the elements
// the field's list may hold:
//
//   - sessionStatus reads its limit of events, default and maximum
//     awareness.MaxChangesLimit, when changesSince is given, and StateChanges.events
//     holds that many;
//   - sessionsList reads its first sessions, default 50, maximum
//     awareness.MaxListLimit, and SessionList.sessions holds that many;
//   - activity reads ActivityReadCost and holds a bucket per minute of its window,
//     sinceMinutes, default 60; noticeActivity, counted in memory, reads nothing and
//     holds as many;
//   - stateEvents and stateEventFeed with afterSequence replay the log: they read
//     awareness.MaxChangesLimit, as a full sessionStatus page;
//   - StaleNotice.digest reads DigestReadCost per notice of the enclosing list;
//   - recordEvents holds one element per input, ackNotices and acknowledgeNotices
//     one per notice named;
//   - RecordEventResult.skippedWatchers holds at most the most watchers any input of
//     the call names; a stored event's watchers list is bounded by
//     awareness.MaxWatchersPerEvent;
//   - any other list: DefaultListCost;
//   - introspection fields such as __schema and __type: 1 each, no list weight, as
//     gqlgen counts them.
func OperationCost(op *ast.OperationDefinition, vars map[string]any) int {
	w := costWalk{vars: vars}
	return w.set(op.SelectionSet, 0, 0)
}

type costWalk struct {
	vars map[string]any
	// watchers is the most watchers an input of the enclosing recordEvent or
	// recordEvents names; 0 outside one.
	watchers int
}

// set returns the cost of a selection set; limit and first are the size arguments of
// the enclosing sessionStatus and sessionsList, 0 outside one.
func (w costWalk) set(set ast.SelectionSet, limit, first int) int {
	cost := 0
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			cost += w.field(s, limit, first)
		case *ast.InlineFragment:
			cost += w.set(s.SelectionSet, limit, first)
		case *ast.FragmentSpread:
			if s.Definition != nil {
				cost += w.set(s.Definition.SelectionSet, limit, first)
			}
		}
		if cost > CostBudget {
			return CostBudget + 1
		}
	}
	return cost
}

func (w costWalk) field(f *ast.Field, limit, first int) int {
	if f.Definition == nil || f.ObjectDefinition == nil {
		return 1
	}
	parent := f.ObjectDefinition.Name
	if strings.HasPrefix(f.Name, "__") || strings.HasPrefix(parent, "__") {
		return 1 + w.set(f.SelectionSet, limit, first)
	}
	read, elems := 0, DefaultListCost
	switch parent + "." + f.Name {
	case "Query.sessionStatus":
		limit = w.intArg(f, "limit", awareness.MaxChangesLimit, awareness.MaxChangesLimit)
		if v, ok := f.ArgumentMap(w.vars)["changesSince"]; ok && v != nil {
			read = limit
		}
	case "Query.sessionsList":
		first = w.intArg(f, "first", 50, awareness.MaxListLimit)
		read = first
	case "Subscription.stateEvents", "Subscription.stateEventFeed":
		if v, ok := f.ArgumentMap(w.vars)["afterSequence"]; ok && v != nil {
			read = awareness.MaxChangesLimit // a replay: priced as a full reconciliation page
		}
	case "StaleNotice.digest":
		read = DigestReadCost
	case "StateChanges.events":
		elems = max(limit, 1)
	case "SessionList.sessions":
		elems = max(first, 1)
	case "Query.activity":
		read = ActivityReadCost
		elems = w.intArg(f, "sinceMinutes", 60, awareness.MaxActivityMinutes)
	case "Query.noticeActivity":
		elems = w.intArg(f, "sinceMinutes", 60, awareness.MaxActivityMinutes)
	case "Mutation.recordEvents":
		elems = max(listLen(f, w.vars, "inputs"), 1)
		w.watchers = mostWatchers(f.ArgumentMap(w.vars)["inputs"])
	case "Mutation.recordEvent":
		w.watchers = mostWatchers([]any{f.ArgumentMap(w.vars)["input"]})
	case "RecordEventResult.skippedWatchers":
		elems = max(w.watchers, 1)
	case "Mutation.ackNotices", "Mutation.acknowledgeNotices":
		if n := listLen(f, w.vars, "notices"); n > 0 {
			elems = n
		}
	}
	if f.Definition.Type.Elem == nil {
		elems = 1
	}
	child := w.set(f.SelectionSet, limit, first)
	return min(1+read+elems*child, CostBudget+1)
}

// mostWatchers returns the most watchers one of inputs names, at most
// awareness.MaxWatchersPerEvent since an input naming more is refused before it runs;
// DefaultListCost when the inputs are not a list of objects.
func mostWatchers(inputs any) int {
	l, ok := inputs.([]any)
	if !ok {
		return DefaultListCost
	}
	n := 0
	for _, in := range l {
		m, ok := in.(map[string]any)
		if !ok {
			return DefaultListCost
		}
		ws, _ := m["watchers"].([]any)
		n = max(n, min(len(ws), awareness.MaxWatchersPerEvent))
	}
	return n
}

// listLen returns the length of the field's list argument name; 0 when absent or null.
func listLen(f *ast.Field, vars map[string]any, name string) int {
	l, _ := f.ArgumentMap(vars)[name].([]any)
	return len(l)
}

// intArg returns the field's integer argument name, def when absent or null, clamped
// to [1, maxV]: the resolver refuses or clamps values outside, and the cost counts the
// most the call can return.
func (w costWalk) intArg(f *ast.Field, name string, def, maxV int) int {
	v, ok := f.ArgumentMap(w.vars)[name]
	if !ok || v == nil {
		return def
	}
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case int32:
		n = int64(x)
	case float64:
		n = int64(x)
	case json.Number:
		p, err := x.Int64()
		if err != nil {
			return maxV
		}
		n = p
	default:
		return maxV
	}
	return int(min(max(n, 1), int64(maxV)))
}
