// Package workflow is the workflow file format, version 1: parsing with
// line and column positions, validation, and matching a workflow's `on:`
// triggers against an event. See docs/workflow.md.
//
// It never executes anything and never reads files itself: callers pass the
// path (for messages) and the bytes. It must never panic or take long on
// any input, since the server parses whatever a push contains: input is
// bounded (MaxFileSize and token limits) before the YAML parser sees it,
// and FuzzParse guards the rest.
package workflow
