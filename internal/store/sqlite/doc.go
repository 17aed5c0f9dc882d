// Package sqlite runs store.Store (sqlstore) on an embedded SQLite database
// (modernc.org/sqlite, no cgo) in WAL mode with a busy timeout. The schema
// is built by numbered migrations embedded from migrations/*.sql and
// recorded in the schema_migrations table.
//
// It must never store a plaintext token or secret value, and never change
// a migration that has shipped: add a new numbered file instead.
package sqlite
