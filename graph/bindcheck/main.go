// Command bindcheck checks gqlgen.yml against the schema before gqlgen runs (it is the
// first go:generate step). An enum bound to a domain type must bind every value the
// schema gives it, and only those: gqlgen answers a missing value with a nil-pointer
// crash that names nothing and deletes graph/generated/generated.go.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/99designs/gqlgen/codegen/config"
	"github.com/vektah/gqlparser/v2/ast"
)

func main() {
	path := flag.String("config", "gqlgen.yml", "the gqlgen configuration, whose schema paths are relative to the working directory")
	flag.Parse()
	f, err := os.Open(*path)
	if err == nil {
		err = check(f)
		f.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bindcheck: %s:\n%v\n", *path, err)
		os.Exit(1)
	}
}

// check reads a gqlgen configuration and its schema and returns every enum binding
// that does not match the schema, one per line.
func check(cfgFile io.Reader) error {
	cfg, err := config.ReadConfig(cfgFile)
	if err != nil {
		return err
	}
	if err := cfg.LoadSchema(); err != nil {
		return err
	}
	var problems []string
	for name, entry := range cfg.Models {
		if len(entry.EnumValues) == 0 {
			continue
		}
		def := cfg.Schema.Types[name]
		if def == nil || def.Kind != ast.Enum {
			problems = append(problems, fmt.Sprintf("models.%s binds enum_values, but the schema has no enum %s", name, name))
			continue
		}
		for _, v := range def.EnumValues {
			if _, ok := entry.EnumValues[v.Name]; !ok {
				problems = append(problems, fmt.Sprintf("models.%s.enum_values has no %s: the schema defines %s.%s; bind it to its Go constant", name, v.Name, name, v.Name))
			}
		}
		for v := range entry.EnumValues {
			if def.EnumValues.ForName(v) == nil {
				problems = append(problems, fmt.Sprintf("models.%s.enum_values binds %s, which the schema's enum %s does not define", name, v, name))
			}
		}
	}
	slices.Sort(problems)
	var errs []error
	for _, p := range problems {
		errs = append(errs, errors.New(p))
	}
	return errors.Join(errs...)
}
