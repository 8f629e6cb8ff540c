package main

// The one configuration loader of the binary. Every command defines its flags on a
// flagSet, each flag with the environment variable that is its fallback, and parse
// resolves them: the command line first, then, for every flag not given there, its
// variable; the flag wins over the variable. validateDB is the one rule for --db,
// parseLogLevel the one for --log-level.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/awareness/awareness/internal/models"
)

// defaultDB is the default of every command's --db and $AWARENESS_DB.
const defaultDB = "./awareness.db"

// flagSet is one command's flags with their environment variables.
type flagSet struct {
	*flag.FlagSet
	env map[string]string // flag name → environment variable
}

// newFlagSet returns an empty flag set that prints nothing: its command prints help
// and errors itself.
func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, env: map[string]string{}}
}

// envFlag defines a flag with define, a method of f such as f.String, whose fallback
// is the environment variable named variable, which its usage ends with.
func envFlag[T any](f *flagSet, define func(name string, value T, usage string) *T, name string, value T, variable, usage string) *T {
	p := define(name, value, usage+" ($"+variable+")")
	f.env[name] = variable
	return p
}

// setEnv makes variable the fallback of the flag name, whose usage names it already.
func (f *flagSet) setEnv(name, variable string) { f.env[name] = variable }

// dbFlag defines --db and its $AWARENESS_DB.
func (f *flagSet) dbFlag(usage string) *string {
	return envFlag(f, f.String, "db", defaultDB, "AWARENESS_DB", usage)
}

// parse parses args, then sets every flag not given on the command line from its
// environment variable, if set. With interspersed, flags and positional arguments may
// come in any order, "--" ending the flags; otherwise the flags end at the first
// positional argument. It returns the positional arguments, and flag.ErrHelp for -h.
func (f *flagSet) parse(args []string, lookupEnv func(string) (string, bool), interspersed bool) ([]string, error) {
	var pos []string
	for {
		before := len(args)
		if err := f.Parse(args); err != nil {
			return nil, err
		}
		rest := f.Args()
		if !interspersed || len(rest) == 0 {
			pos = append(pos, rest...)
			break
		}
		if consumed := before - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	given := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var err error
	f.VisitAll(func(fl *flag.Flag) {
		name := f.env[fl.Name]
		if err != nil || given[fl.Name] || name == "" {
			return
		}
		if v, ok := lookupEnv(name); ok {
			if serr := f.Set(fl.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, serr)
			}
		}
	})
	return pos, err
}

func (f *flagSet) printDefaults(w io.Writer) {
	out := f.Output()
	f.SetOutput(w)
	f.PrintDefaults()
	f.SetOutput(out)
}

// validateDB checks --db: a postgres:// URL that parses, or a plain SQLite file path
// in an existing directory.
func validateDB(db string) error {
	if models.IsPostgresDSN(db) {
		if err := models.CheckPostgresDSN(db); err != nil {
			return fmt.Errorf("--db: %v", err)
		}
		return nil
	}
	if db == "" {
		return errors.New("--db is empty: give the SQLite database file or a postgres:// URL")
	}
	if scheme, ok := urlScheme(db); ok {
		return fmt.Errorf("--db %s://…: the scheme %q is not supported: give a SQLite database file or a postgres:// URL", scheme, scheme)
	}
	if db == ":memory:" || strings.HasPrefix(db, "file:") {
		return fmt.Errorf("--db %q: give a plain file path (the database must survive restarts, NTC-5)", db)
	}
	if fi, err := os.Stat(db); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("--db %q exists and is not a regular file", db)
	}
	if fi, err := os.Stat(filepath.Dir(db)); err != nil || !fi.IsDir() {
		return fmt.Errorf("--db %q: directory %q does not exist", db, filepath.Dir(db))
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items and spaces.
func splitList(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// urlScheme returns the scheme of a URL-like --db, such as "mysql" of "mysql://…",
// which would otherwise be taken for a file path; only the scheme is returned, never
// a password the rest may hold.
func urlScheme(db string) (string, bool) {
	scheme, _, ok := strings.Cut(db, "://")
	if !ok || scheme == "" {
		return "", false
	}
	for i, r := range scheme {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return "", false
		}
	}
	return scheme, true
}

func parseLogLevel(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return level, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return level, nil
}
