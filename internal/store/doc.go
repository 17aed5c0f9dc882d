// Package store is the server's storage seam: one Store interface holding
// accounts and hashed API tokens, repositories, pipelines, runs and steps,
// runners, encrypted secrets and run leases. Handlers use only this
// interface, so a PostgreSQL implementation can sit beside sqlite/ later
// without touching them.
//
// It must never hold a plaintext token or secret value: callers pass token
// hashes and secret ciphertexts. It never reads or writes log files or git
// repositories; those live beside the database in the data directory.
package store
