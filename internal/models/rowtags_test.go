package models

import (
	"database/sql"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/awareness/awareness/internal/models/pgtest"
)

// rowTables are the row structs whose gorm tags describe a table: each with the
// column list its hand-written statements and scanner use ("" when it has none).
// outside names the table's columns the struct leaves out, which statements of their
// own read and write.
var rowTables = []struct {
	row     interface{ TableName() string }
	columns string
	outside []string
}{
	// The derived material state of a session (migration 00004), the append path's;
	// its generation (LIF-2), read and moved by the statements of the lifecycle.
	{SessionRow{}, sessionColumns, []string{"material_actor", "material_at", "material_other_at", "material_other_seq", "material_seq", "generation"}},
	{EventRow{}, eventColumns, nil},
	{CursorRow{}, cursorColumns, nil},
	// When the pruner last expired cursors (the pruner's own statement).
	{MetaRow{}, "", []string{"last_expiry_at"}},
	{UpstreamLinkRow{}, upstreamColumns, nil},
}

// tagColumns returns the columns a row struct's gorm tags name, in field order, and
// those tagged primaryKey.
func tagColumns(t *testing.T, row any) (cols, pk []string) {
	t.Helper()
	typ := reflect.TypeOf(row)
	for i := range typ.NumField() {
		f := typ.Field(i)
		var name string
		isPK := false
		for _, part := range strings.Split(f.Tag.Get("gorm"), ";") {
			k, v, _ := strings.Cut(part, ":")
			switch k {
			case "column":
				name = v
			case "primaryKey":
				isPK = true
			}
		}
		if name == "" {
			t.Errorf("%s.%s has no gorm column tag", typ.Name(), f.Name)
			continue
		}
		cols = append(cols, name)
		if isPK {
			pk = append(pk, name)
		}
	}
	return cols, pk
}

// checkRowTags holds every row struct to its table in the migrated database: the same
// columns (its tags and the columns it leaves outside, the table's), the same primary key, and the column list of its
// statements in the struct's field order. query returns a table's columns and its
// primary key's.
func checkRowTags(t *testing.T, query func(table string) (cols, pk []string, err error)) {
	for _, rt := range rowTables {
		table := rt.row.TableName()
		tags, tagPK := tagColumns(t, rt.row)
		cols, pk, err := query(table)
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		a, b := slices.Sorted(slices.Values(append(slices.Clone(tags), rt.outside...))), slices.Sorted(slices.Values(cols))
		if !slices.Equal(a, b) {
			t.Errorf("%s: the tags of %T and the columns left outside it name %v; the migrated table has %v", table, rt.row, a, b)
		}
		slices.Sort(tagPK)
		slices.Sort(pk)
		if !slices.Equal(tagPK, pk) {
			t.Errorf("%s: %T tags the primary key %v; the table's is %v", table, rt.row, tagPK, pk)
		}
		if rt.columns != "" {
			if list := strings.Split(strings.ReplaceAll(rt.columns, " ", ""), ","); !slices.Equal(list, tags) {
				t.Errorf("%s: the statements' column list is %v; %T's fields are %v", table, list, rt.row, tags)
			}
		}
	}
}

func TestRowTagsMatchTheMigratedSchema_SQLite(t *testing.T) {
	s := MustOpenSQLite(t)
	checkRowTags(t, func(table string) (cols, pk []string, err error) {
		rows, err := s.rsql.QueryContext(t.Context(), "SELECT name, pk FROM pragma_table_info(?)", table)
		if err != nil {
			return nil, nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var inPK int
			if err := rows.Scan(&name, &inPK); err != nil {
				return nil, nil, err
			}
			cols = append(cols, name)
			if inPK > 0 {
				pk = append(pk, name)
			}
		}
		return cols, pk, rows.Err()
	})
}

func TestRowTagsMatchTheMigratedSchema_Postgres(t *testing.T) {
	pgtest.AdminURL(t)
	s := MustOpenPostgres(t)
	checkRowTags(t, func(table string) (cols, pk []string, err error) {
		cols, err = pgStrings(t, s.rsql, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1`, table)
		if err != nil {
			return nil, nil, err
		}
		pk, err = pgStrings(t, s.rsql, `SELECT k.column_name FROM information_schema.table_constraints c
			JOIN information_schema.key_column_usage k ON k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema
			WHERE c.table_schema = current_schema() AND c.table_name = $1 AND c.constraint_type = 'PRIMARY KEY'`, table)
		return cols, pk, err
	})
}

func pgStrings(t *testing.T, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(t.Context(), q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
