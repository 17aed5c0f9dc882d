// Package docscheck holds the docs to the code by checks that build no
// program and start nothing but git and go list: they read Markdown pages,
// and the module's Go sources parsed and type-checked from source (go/ast,
// go/types). Its tests are the checks (TestDocs_*, TestCode_*); the
// package itself is the one parser of a page's fenced blocks and their
// markers ([Blocks]), which the tests of test/e2e that run a page's
// commands use too.
//
// A ```sh block of a page carries a marker, an HTML comment on the line
// before its fence:
//
//	<!-- test -->              run, in order, in the page's test (one shell)
//	<!-- test: background -->  run in the background of that shell: one
//	                           command (knotless-server, knotless-run run)
//	                           waited for until it says it is ready, and
//	                           stopped when the next one of its program
//	                           starts or the script ends
//	<!-- test: values -->      the reader's values (export NAME=...): the
//	                           test sets the same names to its own values
//	<!-- tested by TestName: why -->  a named test runs the same command
//	<!-- illustrative: why --> not run; the reason says what covers it
//
// TestDocs_EveryShellBlockIsRunOrMarked keeps every block marked and the
// named tests real; the pages' own tests (test/e2e) run them.
//
// docs/architecture.md's table of a step's bytes (marked <!-- hops -->)
// is checked hop by hop (TestDocs_ArchitectureHopsAreTheCode; its comment
// has the rule of how one hop reaches the next), its import graph
// (<!-- import graph -->) against go list, every Go name and path it
// writes in backticks against the code (TestDocs_ArchitectureNamesAreTheCode),
// its thin mains (TestDocs_ArchitectureThinMainsAreThin) and its stores
// (TestDocs_ArchitectureNamesEveryStore). The code's comments are held to
// name what exists (TestCode_CommentsNameWhatExists: doc links, and
// Type.Member of a type of their package), and a function over 100 lines
// to say why in its doc comment, in a sentence beginning "Long because"
// (TestCode_FunctionsOver100LinesSayWhyTheyAreLong).
package docscheck
