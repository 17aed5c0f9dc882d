// Package store is the server's storage seam: one Store interface holding
// accounts and hashed API tokens, repositories, pipelines, runs and steps,
// runners, encrypted secrets and run leases. Handlers use only this
// interface; sqlstore writes it once in SQL, on SQLite (sqlite/, one
// process) and PostgreSQL (postgres/, several replicas, which is also a
// Coordinator: notifications and locks across replicas); storetest is
// the suite both pass.
//
// It must never hold a plaintext token or secret value: callers pass token
// hashes and secret ciphertexts. It never reads or writes log files or git
// repositories; those live beside the database in the data directory.
package store
