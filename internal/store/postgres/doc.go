// Package postgres runs store.Store (sqlstore) on PostgreSQL through pgx,
// for several server replicas on one database: it is also a
// store.Coordinator, with LISTEN/NOTIFY for wake-ups and advisory locks for
// what one replica at a time does (the lease sweeper, a repository's
// pushes, migrations). Its numbered migrations are kept in step with
// sqlite's: the same numbers, tables and columns (TestMigrations_InStepWithSQLite).
//
// Transactions run SERIALIZABLE and are retried on a serialization
// failure, so that they mean what they mean on SQLite. It must never store
// a plaintext token or secret value, and never change a shipped migration.
package postgres
