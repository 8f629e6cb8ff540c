package main

// The checks of blocks that are not commands: a file's content, a GraphQL document, Go
// statements, JSON, a layout.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/vektah/gqlparser/v2"
	gqlast "github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator/rules"
)

func static(b block) error {
	switch b.kind {
	case "file":
		want, err := os.ReadFile(b.arg)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(want)) != strings.TrimSpace(b.text) {
			return fmt.Errorf("the block differs from %s:\nblock:\n%s\nfile:\n%s", b.arg, b.text, want)
		}
		return nil
	case "graphql":
		return checkGraphQL(b.text)
	case "go":
		return checkGo(b.text, b.arg)
	case "json":
		var v any
		if err := json.Unmarshal([]byte(b.text), &v); err != nil {
			return fmt.Errorf("not JSON: %v", err)
		}
		return nil
	case "paths":
		return checkPaths(b.text)
	}
	return fmt.Errorf("unknown kind %q", b.kind)
}

func checkGraphQL(doc string) error {
	schema, err := os.ReadFile(filepath.Join("graph", "schema.graphqls"))
	if err != nil {
		return err
	}
	s, err := gqlparser.LoadSchema(&gqlast.Source{Name: "schema.graphqls", Input: string(schema)})
	if err != nil {
		return fmt.Errorf("schema: %v", err)
	}
	if _, errs := gqlparser.LoadQueryWithRules(s, doc, rules.NewDefaultRules()); len(errs) > 0 {
		return fmt.Errorf("invalid against graph/schema.graphqls: %v", errs)
	}
	return nil
}

// goImports are the packages a Go block may name, by the name it uses.
var goImports = map[string]string{
	"client":  "github.com/awareness/awareness/client",
	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"slog":    "log/slog",
	"time":    "time",
}

// checkGo type-checks stmts as the body of func(params), or of func(PARAMS) RESULTS
// when params reads "PARAMS -> RESULTS", importing the packages of goImports it
// names. Unused variables and imports are allowed (go/types' soft errors), and so is a
// missing final return: a README shows the calls, not a whole program.
func checkGo(stmts, params string) error {
	params, results, _ := strings.Cut(params, " -> ")
	var imports []string
	for name, path := range goImports {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(stmts + params) {
			imports = append(imports, path)
		}
	}
	sort.Strings(imports)
	var src strings.Builder
	src.WriteString("package readme\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&src, "\t%q\n", p)
	}
	fmt.Fprintf(&src, ")\n\nfunc _(%s) %s {\n%s\n}\n", params, results, stmts)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "README.go", src.String(), 0)
	if err != nil {
		return fmt.Errorf("does not parse: %v\n%s", err, src.String())
	}
	exports, err := exportData(imports)
	if err != nil {
		return err
	}
	var hard []string
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			file, ok := exports[path]
			if !ok {
				return nil, fmt.Errorf("no export data for %s", path)
			}
			return os.Open(file)
		}),
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) && (te.Soft || te.Msg == "missing return") {
				return
			}
			hard = append(hard, err.Error())
		},
	}
	_, _ = conf.Check("readme", fset, []*ast.File{f}, nil)
	if len(hard) > 0 {
		return fmt.Errorf("does not type-check:\n%s\n%s", strings.Join(hard, "\n"), src.String())
	}
	return nil
}

// exportData returns the compiler's export data files of pkgs and their dependencies.
func exportData(pkgs []string) (map[string]string, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v\n%s", err, stderr.String())
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "="); ok && file != "" {
			m[path] = file
		}
	}
	return m, nil
}

// checkPaths checks a layout block: each line that does not start with a space names
// paths (comma-separated, before two spaces) that exist.
func checkPaths(text string) error {
	var missing []string
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, " ") {
			continue
		}
		names, _, _ := strings.Cut(line, "  ")
		for _, p := range strings.Split(names, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			if _, err := os.Stat(p); err != nil {
				missing = append(missing, p)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the layout names paths that do not exist: %v", missing)
	}
	return nil
}
