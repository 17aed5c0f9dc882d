// Package storetest is the behavioural suite of store.Store: Run runs every
// test against a store an Opener makes, so that each implementation
// (sqlite, postgres) is held to the same contract, concurrency included
// (two server replicas claiming, renewing and ending the same runs through
// two stores on one database: Replicas).
//
// It must never depend on one implementation: only store.Store, and plain
// SQL through database/sql for the few checks of a table's rows.
package storetest
