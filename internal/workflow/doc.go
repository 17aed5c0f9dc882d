// Package workflow is the workflow file format, version 1: parsing with
// line and column positions, validation, and matching a workflow's `on:`
// triggers against an event. See docs/workflow.md (design: WORKFLOW.md).
//
// It never executes anything and never reads files itself: callers pass the
// path (for messages) and the bytes.
package workflow
