package main

// The command-line tools of the binary next to serve (REG-4): status, sessions and
// import, on the database of --db or $AWARENESS_DB. They mirror `openclaw status`
// and `openclaw sessions --json`. Each opens the database, makes calls on
// awareness.Service or the store, prints, and closes it; none starts a goroutine.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// toolEnv is what a command-line tool takes from the process; tests inject it.
type toolEnv struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	lookupEnv      func(string) (string, bool)
	now            func() time.Time
}

func processToolEnv(stdout, stderr io.Writer) toolEnv {
	return toolEnv{stdout: stdout, stderr: stderr, stdin: os.Stdin, lookupEnv: os.LookupEnv, now: time.Now}
}

// runTool runs one of the tools and returns the exit code.
func runTool(ctx context.Context, cmd string, args []string, env toolEnv) int {
	switch cmd {
	case "status":
		return statusCmd(ctx, args, env)
	case "sessions":
		return sessionsCmd(ctx, args, env)
	case "import":
		return importCmd(ctx, args, env)
	}
	fmt.Fprintf(env.stderr, "awareness: unknown command %q\n", cmd)
	return exitUsage
}

// toolFlags is the flag set of one tool, with the flags every tool shares.
type toolFlags struct {
	name, usage, about string
	fs                 *flagSet
	db                 *string
	env                toolEnv
}

func newToolFlags(env toolEnv, name, usage, about string) *toolFlags {
	fs := newFlagSet(name) // help and errors are printed by parse
	t := &toolFlags{name: name, usage: usage, about: about, fs: fs, env: env}
	t.db = fs.dbFlag("SQLite database file, or a postgres:// URL")
	return t
}

// parse parses args, flags and positional arguments in any order, "--" ending the
// flags, then takes every flag not given from its environment variable, and checks
// --db. It returns the positional arguments; ok is false when the tool must exit with
// code.
func (t *toolFlags) parse(args []string) (pos []string, code int, ok bool) {
	pos, err := t.fs.parse(args, t.env.lookupEnv, true)
	if errors.Is(err, flag.ErrHelp) {
		t.printHelp(t.env.stdout)
		return nil, exitOK, false
	}
	if err != nil {
		return nil, t.usageError(err.Error()), false
	}
	if err := validateDB(strings.TrimSpace(*t.db)); err != nil {
		return nil, t.usageError(err.Error()), false
	}
	return pos, exitOK, true
}

func (t *toolFlags) usageError(msg string) int {
	fmt.Fprintf(t.env.stderr, "awareness %s: %s\nRun 'awareness %s --help' for usage.\n", t.name, msg, t.name)
	return exitUsage
}

func (t *toolFlags) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: awareness %s\n\n%s\n\nFlags:\n", t.usage, strings.TrimSpace(t.about))
	t.fs.printDefaults(w)
	fmt.Fprint(w, "\nExit status: 0 ok, 1 failure, 2 bad command line.\n")
}

// openTool opens the database. mustExist refuses to create a missing file: reading
// tools report an empty path instead of creating a database there.
func openTool(ctx context.Context, t *toolFlags, mustExist bool) (*models.Store, *awareness.Service, bool) {
	db := strings.TrimSpace(*t.db)
	if mustExist && !models.IsPostgresDSN(db) {
		if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(t.env.stderr, "awareness %s: no database at %s (give --db or $AWARENESS_DB; 'awareness serve' creates it)\n", t.name, db)
			return nil, nil, false
		}
	}
	store, err := models.Open(ctx, db, models.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintf(t.env.stderr, "awareness %s: open database %s: %v\n", t.name, models.RedactDSN(db), err)
		return nil, nil, false
	}
	svc := awareness.NewService(awareness.Config{Store: store, Now: t.env.now})
	return store, svc, true
}

// toolFailed prints a failure and returns exitError. Internal causes are printed too:
// the operator of a local tool is the one who can act on them.
func toolFailed(env toolEnv, name string, err error) int {
	msg := awareness.ErrorMessage(err)
	if e, ok := errors.AsType[*awareness.Error](err); ok {
		if e.Err != nil {
			msg += ": " + e.Err.Error()
		}
	} else {
		msg = err.Error()
	}
	fmt.Fprintf(env.stderr, "awareness %s: %s\n", name, msg)
	return exitError
}

func closeTool(env toolEnv, name string, store *models.Store, code int) int {
	if err := store.Close(); err != nil {
		fmt.Fprintf(env.stderr, "awareness %s: close database: %v\n", name, err)
		return exitError
	}
	return code
}

// ---------------------------------------------------------------------------------------
// status

// statusJSON is the --json output of status.
type statusJSON struct {
	Database       string        `json:"database"`
	Sessions       int64         `json:"sessions"`
	Events         int64         `json:"events"`
	Cursors        int64         `json:"cursors"`
	PendingNotices int64         `json:"pendingNotices"`
	Retention      retentionJSON `json:"retention"`
	OldestEventAt  *time.Time    `json:"oldestEventAt"`
	LastPruneAt    *time.Time    `json:"lastPruneAt"`
	Migrations     string        `json:"migrations"`
}

type retentionJSON struct {
	MaxAgeSeconds    int64 `json:"maxAgeSeconds"`
	MaxRows          int   `json:"maxRows"`
	CursorTTLSeconds int64 `json:"cursorTtlSeconds"`
}

func statusCmd(ctx context.Context, args []string, env toolEnv) int {
	t := newToolFlags(env, "status", "status [--json] [--db PATH] [--retention D] [--max-rows N]", `
Print the state of the service's database: session, event and cursor counts,
pending notices, the retention settings, the last prune and the oldest retained
event. The database is opened read-write (pending migrations are applied) but
nothing is changed.

Retention is configuration, not state: status shows the values of --retention and
--max-rows (or $AWARENESS_RETENTION, $AWARENESS_MAX_ROWS, else the defaults), which
are what 'awareness serve' uses given the same environment.`)
	asJSON := t.fs.Bool("json", false, "print JSON for scripts")
	retention := envFlag(t.fs, t.fs.Duration, "retention", awareness.DefaultRetention, "AWARENESS_RETENTION", "retention age to report, as for serve")
	maxRows := envFlag(t.fs, t.fs.Int, "max-rows", awareness.DefaultMaxRows, "AWARENESS_MAX_ROWS", "row cap to report, as for serve")
	pos, code, ok := t.parse(args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return t.usageError(fmt.Sprintf("unexpected arguments: %q", pos))
	}
	if *retention < 0 || *maxRows < 0 {
		return t.usageError("--retention and --max-rows must not be negative")
	}
	store, _, ok := openTool(ctx, t, true)
	if !ok {
		return exitError
	}
	st, err := store.Stats(ctx)
	if err != nil {
		return closeTool(env, t.name, store, toolFailed(env, t.name, err))
	}
	migrations := "applied"
	if err := store.Ping(ctx); err != nil {
		migrations = "not ready: " + awareness.ErrorMessage(err)
	}
	out := statusJSON{
		Database:       models.RedactDSN(strings.TrimSpace(*t.db)),
		Sessions:       st.Sessions,
		Events:         st.Events,
		Cursors:        st.Cursors,
		PendingNotices: st.PendingNotices,
		Retention: retentionJSON{
			MaxAgeSeconds:    int64(retention.Seconds()),
			MaxRows:          *maxRows,
			CursorTTLSeconds: int64(retention.Seconds()),
		},
		OldestEventAt: st.OldestEvent,
		LastPruneAt:   st.LastPruneAt,
		Migrations:    migrations,
	}
	if *asJSON {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return closeTool(env, t.name, store, toolFailed(env, t.name, err))
		}
		fmt.Fprintf(env.stdout, "%s\n", b)
		return closeTool(env, t.name, store, exitOK)
	}
	now := env.now().UTC()
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Database\t%s\n", out.Database)
	fmt.Fprintf(tw, "Migrations\t%s\n", migrations)
	fmt.Fprintf(tw, "Sessions\t%d\n", st.Sessions)
	fmt.Fprintf(tw, "Events\t%d\n", st.Events)
	fmt.Fprintf(tw, "Oldest event\t%s\n", whenText(st.OldestEvent, now, "none"))
	fmt.Fprintf(tw, "Watch cursors\t%d\n", st.Cursors)
	fmt.Fprintf(tw, "Pending notices\t%d\n", st.PendingNotices)
	fmt.Fprintf(tw, "Retention\t%s\n", retentionText(*retention, *maxRows))
	fmt.Fprintf(tw, "Last prune\t%s\n", whenText(st.LastPruneAt, now, "never"))
	if err := tw.Flush(); err != nil {
		return closeTool(env, t.name, store, toolFailed(env, t.name, err))
	}
	return closeTool(env, t.name, store, exitOK)
}

func retentionText(age time.Duration, maxRows int) string {
	var parts []string
	if age > 0 {
		parts = append(parts, "events older than "+durationText(age)+" pruned", "cursors idle "+durationText(age)+" expire")
	} else {
		parts = append(parts, "no age limit")
	}
	if maxRows > 0 {
		parts = append(parts, "at most "+strconv.Itoa(maxRows)+" events")
	} else {
		parts = append(parts, "no row cap")
	}
	return strings.Join(parts, ", ")
}

func whenText(t *time.Time, now time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.UTC().Format(time.RFC3339) + " (" + ageText(now.Sub(*t)) + ")"
}

// durationText prints whole days as "30d", anything else as time.Duration does.
func durationText(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// ageText prints how long ago something happened, coarsely.
func ageText(d time.Duration) string {
	switch {
	case d < 0:
		return "in the future"
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h ago"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d ago"
}

// ---------------------------------------------------------------------------------------
// sessions

func sessionsCmd(ctx context.Context, args []string, env toolEnv) int {
	t := newToolFlags(env, "sessions", "sessions [--json] [--agent ID] [--active MINUTES] [--db PATH]", `
List the sessions registry with each session's stateVersion, ordered by agent and
key: a table for people, or with --json an array for scripts, shaped like
'openclaw sessions --json' entries: sessionKey, agentId, kind, registered,
stateVersion (omitted when 0), then the SessionEntry fields (updatedAt and
memoryFlushAt in epoch milliseconds, as in sessions.json) and every other field the
gateway stored.`)
	asJSON := t.fs.Bool("json", false, "print a JSON array for scripts")
	agent := t.fs.String("agent", "", "only this agent's sessions")
	active := t.fs.Int("active", 0, "only sessions updated in the last MINUTES minutes")
	pos, code, ok := t.parse(args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return t.usageError(fmt.Sprintf("unexpected arguments: %q", pos))
	}
	var f awareness.SessionFilter
	if *agent != "" {
		a := strings.ToLower(strings.TrimSpace(*agent))
		if !awareness.ValidAgentID(a) {
			return t.usageError(fmt.Sprintf("--agent %q is not a valid agent id ([a-z0-9][a-z0-9_-]{0,63})", *agent))
		}
		f.AgentID = &a
	}
	given := false
	t.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == "active" })
	if given {
		if *active < 1 {
			return t.usageError(fmt.Sprintf("--active %d: want a positive number of minutes", *active))
		}
		f.ActiveMinutes = active
	}
	store, svc, ok := openTool(ctx, t, true)
	if !ok {
		return exitError
	}
	if *asJSON {
		return closeTool(env, t.name, store, writeSessionsJSON(ctx, env, svc, f))
	}
	return closeTool(env, t.name, store, writeSessionsTable(ctx, env, svc, f, models.RedactDSN(strings.TrimSpace(*t.db))))
}

// eachSession pages through the registry in keyset pages of awareness.MaxListLimit.
// The listing is not one snapshot: sessions written while it runs may or may not
// appear.
func eachSession(ctx context.Context, svc *awareness.Service, f awareness.SessionFilter, fn func(awareness.Session) error) error {
	var after *string
	for {
		page, err := svc.SessionsList(ctx, f, awareness.MaxListLimit, after)
		if err != nil {
			return err
		}
		for _, s := range page.Sessions {
			if err := fn(s); err != nil {
				return err
			}
		}
		if !page.HasNextPage {
			return nil
		}
		after = &page.EndCursor
	}
}

func writeSessionsJSON(ctx context.Context, env toolEnv, svc *awareness.Service, f awareness.SessionFilter) int {
	var (
		buf bytes.Buffer
		n   int
	)
	buf.WriteString("[")
	err := eachSession(ctx, svc, f, func(s awareness.Session) error {
		obj, err := sessionJSON(s)
		if err != nil {
			return err
		}
		if n > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\n  ")
		if err := json.Indent(&buf, obj, "  ", "  "); err != nil {
			return err
		}
		n++
		if buf.Len() >= 64<<10 {
			if _, err := env.stdout.Write(buf.Bytes()); err != nil {
				return err
			}
			buf.Reset()
		}
		return nil
	})
	if err != nil {
		return toolFailed(env, "sessions", err)
	}
	if n > 0 {
		buf.WriteString("\n")
	}
	buf.WriteString("]\n")
	if _, err := env.stdout.Write(buf.Bytes()); err != nil {
		return toolFailed(env, "sessions", err)
	}
	return exitOK
}

// sessionJSON encodes one session as a JSON object with a fixed field order: the
// service's fields, the SessionEntry fields, then the extra fields sorted by name.
// Times are epoch milliseconds, as in sessions.json.
func sessionJSON(s awareness.Session) ([]byte, error) {
	var b bytes.Buffer
	seen := map[string]bool{}
	add := func(k string, v any) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if len(seen) > 0 {
			b.WriteByte(',')
		}
		seen[k] = true
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(raw)
		return nil
	}
	e := s.Entry
	kind := s.Kind
	if kind == "" {
		kind = awareness.ClassifyKey(s.Ref.Key)
	}
	b.WriteByte('{')
	fields := []struct {
		name string
		v    any
		ok   bool
	}{
		{"sessionKey", s.Ref.Key, true},
		{"agentId", s.Ref.AgentID, true},
		{"kind", kind, true},
		{"registered", s.Registered, true},
		{"stateVersion", s.StateVersion, s.StateVersion > 0},
		{"sessionId", e.SessionID, e.SessionID != nil},
		{"updatedAt", s.UpdatedAt.UnixMilli(), true},
		{"chatType", e.ChatType, e.ChatType != nil},
		{"provider", e.Provider, e.Provider != nil},
		{"displayName", e.DisplayName, e.DisplayName != nil},
		{"parentSessionKey", e.ParentSessionKey, e.ParentSessionKey != nil},
		{"inputTokens", e.InputTokens, e.InputTokens != nil},
		{"outputTokens", e.OutputTokens, e.OutputTokens != nil},
		{"totalTokens", e.TotalTokens, e.TotalTokens != nil},
		{"contextTokens", e.ContextTokens, e.ContextTokens != nil},
		{"compactionCount", s.CompactionCount, true},
		{"memoryFlushAt", millisPtr(e.MemoryFlushAt), e.MemoryFlushAt != nil},
		{"memoryFlushCompactionCount", e.MemoryFlushCompactionCount, e.MemoryFlushCompactionCount != nil},
	}
	for _, f := range fields {
		if f.ok {
			if err := add(f.name, f.v); err != nil {
				return nil, err
			}
		}
	}
	keys := make([]string, 0, len(e.Extra))
	for k := range e.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if seen[k] {
			continue // an unknown field named like one of ours; GraphQL's extra still has it
		}
		if err := add(k, e.Extra[k]); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func millisPtr(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	n := t.UnixMilli()
	return &n
}

func writeSessionsTable(ctx context.Context, env toolEnv, svc *awareness.Service, f awareness.SessionFilter, db string) int {
	now := env.now().UTC()
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tKEY\tKIND\tUPDATED\tVERSION\tCONTEXT\tCOMPACTIONS\tSESSION ID\tNAME")
	n := 0
	err := eachSession(ctx, svc, f, func(s awareness.Session) error {
		n++
		version := "-"
		if s.StateVersion > 0 {
			version = strconv.FormatInt(s.StateVersion, 10)
		}
		_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n",
			s.Ref.AgentID, cell(s.Ref.Key, 0), s.Kind, ageText(now.Sub(s.UpdatedAt)), version,
			intCell(s.Entry.ContextTokens), s.CompactionCount, strCell(s.Entry.SessionID, 40), strCell(s.Entry.DisplayName, 32))
		return err
	})
	if err != nil {
		return toolFailed(env, "sessions", err)
	}
	if err := tw.Flush(); err != nil {
		return toolFailed(env, "sessions", err)
	}
	what := "sessions"
	if n == 1 {
		what = "session"
	}
	filters := ""
	if f.AgentID != nil {
		filters += " of agent " + *f.AgentID
	}
	if f.ActiveMinutes != nil {
		filters += fmt.Sprintf(" active in the last %d minutes", *f.ActiveMinutes)
	}
	fmt.Fprintf(env.stdout, "\n%d %s%s in %s\n", n, what, filters, db)
	return exitOK
}

func intCell(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

func strCell(v *string, max int) string {
	if v == nil || *v == "" {
		return "-"
	}
	return cell(*v, max)
}

// cell makes a value safe for one table cell: control characters and tabs become
// '?', and it is cut at max runes; 0 means no limit.
func cell(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if max > 0 && n == max {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			r = '?'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// ---------------------------------------------------------------------------------------
// import

func importCmd(ctx context.Context, args []string, env toolEnv) int {
	t := newToolFlags(env, "import", "import --agent ID [--db PATH] FILE", `
Import a gateway's sessions.json (REG-2): FILE maps session keys to SessionEntry
objects, as ~/.openclaw/agents/<ID>/sessions/sessions.json does; '-' reads standard
input. Keys are canonical (agent:<ID>:…, of this agent only) or bare (global,
cron:…, hook:…). Each imported entry replaces the registered one; fields the
service does not know are kept. A malformed file (bad key, wrong type, truncated
JSON) is rejected as a whole, naming the entry, and nothing is written. The
database is created when missing.`)
	agent := t.fs.String("agent", "", "the agent whose sessions.json this is (required)")
	pos, code, ok := t.parse(args)
	if !ok {
		return code
	}
	if strings.TrimSpace(*agent) == "" {
		return t.usageError("--agent is required")
	}
	a := strings.ToLower(strings.TrimSpace(*agent))
	if !awareness.ValidAgentID(a) {
		return t.usageError(fmt.Sprintf("--agent %q is not a valid agent id ([a-z0-9][a-z0-9_-]{0,63})", *agent))
	}
	if len(pos) != 1 {
		return t.usageError(fmt.Sprintf("want exactly one FILE, got %d arguments", len(pos)))
	}
	data, err := readImportFile(pos[0], env.stdin)
	if err != nil {
		fmt.Fprintf(env.stderr, "awareness import: %v\n", err)
		return exitError
	}
	// Reject a malformed file before creating or opening anything.
	if _, err := awareness.ParseSessionsJSON(a, data); err != nil {
		return toolFailed(env, t.name, err)
	}
	store, svc, ok := openTool(ctx, t, false)
	if !ok {
		return exitError
	}
	n, err := svc.ImportSessions(ctx, a, data)
	if err != nil {
		return closeTool(env, t.name, store, toolFailed(env, t.name, err))
	}
	what := "sessions"
	if n == 1 {
		what = "session"
	}
	fmt.Fprintf(env.stdout, "imported %d %s of agent %s into %s\n", n, what, a, strings.TrimSpace(*t.db))
	return closeTool(env, t.name, store, exitOK)
}

func readImportFile(name string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		if stdin == nil {
			return nil, errors.New("no standard input")
		}
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, awareness.MaxImportBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > awareness.MaxImportBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, awareness.MaxImportBytes)
	}
	return data, nil
}
