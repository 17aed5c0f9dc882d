package workflow

import (
	"fmt"
	"strings"
)

// Error is one problem in a workflow file, at a 1-based line and column.
type Error struct {
	Path string
	Line int
	Col  int
	Msg  string
}

// Error formats the problem as "PATH:LINE:COL: message".
func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Line, e.Col, e.Msg)
}

// ErrorList is every problem Parse found in one file, in file order.
type ErrorList []*Error

// Error joins the problems, one per line.
func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}
