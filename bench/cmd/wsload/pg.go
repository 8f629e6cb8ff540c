package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// The service on PostgreSQL (-pg): a fresh database on the server of -pg's URL,
// created before the run and dropped after it, as bench/cmd/pgscale does.

// createPGDB creates an empty database on the server of admin and returns its URL.
func createPGDB(ctx context.Context, admin string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("wsload_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dropPGDB drops the database of dsn, created by createPGDB, on the server of admin.
func dropPGDB(admin, dsn string) {
	u, err := url.Parse(dsn)
	if err != nil || len(u.Path) < 2 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		logf("drop %s: %v", u.Path[1:], err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+u.Path[1:]+" WITH (FORCE)"); err != nil {
		logf("drop %s: %v", u.Path[1:], err)
	}
}
