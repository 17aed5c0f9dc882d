// Package pipegraph lays a pipeline's runs out the way `knotless run list
// --pipeline` and the web Pipelines view show them: the runs of one
// workflow file form a group (a matrix's runs, or one run), each run with
// its attempts (retries) in order, and groups fall into stages by their
// needs (a group comes after every group it needs).
//
// It only reads api.Run values (their Needs, Matrix, RetryOf and
// RetriedBy); it must never call anything or decide what a run is.
package pipegraph
