// Package sqlstore is store.Store written once in SQL over database/sql,
// for every database Knotless runs on: sqlite/ and postgres/ give it a
// driver, a Dialect (placeholders, unique-violation errors, transaction
// isolation and retries) and their numbered migrations, kept in step (the
// same numbers, the same tables and columns; times are BIGINT milliseconds
// since the Unix epoch on both, so a row copies across unchanged).
//
// Every query here must mean the same on SQLite and PostgreSQL: portable
// SQL (RETURNING, ON CONFLICT, CASE, COALESCE, TRUE/FALSE), ? placeholders,
// no ? inside string literals. Transactions are serialized on both (SQLite
// takes the write lock at BEGIN; PostgreSQL runs them SERIALIZABLE and
// DB.tx retries the ones it aborts), so a closure passed to tx must set
// what it returns afresh each time it runs. It must never store a
// plaintext token or secret value.
package sqlstore
