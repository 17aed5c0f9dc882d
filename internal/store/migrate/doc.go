// Package migrate copies a Knotless database from SQLite to PostgreSQL
// (knotless-server migrate --to postgres://...): every table, row for row,
// into a new, empty PostgreSQL database made by postgres' migrations, then
// moves the id sequences past the copied ids and checks each table's count.
//
// It must never write to the SQLite database, and never into a
// PostgreSQL database that holds rows already (it refuses, saying so).
package migrate
