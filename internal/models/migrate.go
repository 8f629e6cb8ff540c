package models

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
)

// migrations holds the versioned SQL migrations, one directory per dialect:
// migrations/sqlite and migrations/postgres carry the same versions with equivalent
// schemas. The schema is never created with AutoMigrate.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrations embed.FS

// MigrationsFS returns the migrations of one dialect: "sqlite" or "postgres".
func MigrationsFS(dialect string) (fs.FS, error) {
	switch dialect {
	case "sqlite", "postgres":
		return fs.Sub(migrations, "migrations/"+dialect)
	}
	return nil, fmt.Errorf("models: no migrations for dialect %q", dialect)
}

// newMigrator returns a goose provider over db for the dialect's embedded migrations.
// extra adds provider options, such as PostgreSQL's session locker, so that processes
// starting together apply each migration once.
func newMigrator(d dialect, db *sql.DB, log *slog.Logger, extra ...goose.ProviderOption) (*goose.Provider, error) {
	fsys, err := MigrationsFS(d.name)
	if err != nil {
		return nil, err
	}
	opts := append([]goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(log),
	}, extra...)
	return goose.NewProvider(d.goose, db, fsys, opts...)
}

// migrate applies every pending migration and logs what it applied.
func migrate(ctx context.Context, p *goose.Provider, log *slog.Logger) error {
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	for _, r := range results {
		log.Info("applied migration", "version", r.Source.Version, "duration", r.Duration)
	}
	return nil
}

// checkMigrated fails when a migration known to this binary is not applied.
func checkMigrated(ctx context.Context, p *goose.Provider) error {
	pending, err := p.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("read migration status: %w", err)
	}
	if pending {
		return fmt.Errorf("migrations pending")
	}
	return nil
}
