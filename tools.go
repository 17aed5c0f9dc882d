//go:build tools

// This file pins modules the packages import as they are written, so that
// go.mod and go.sum stay complete while parts land one by one.
package knotless

import (
	_ "github.com/goccy/go-yaml"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/term"
	_ "modernc.org/sqlite"
)
