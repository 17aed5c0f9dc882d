// Package outputs is the format of a run's outputs archive, the one thing
// the runner (Pack), the server (Scan) and the CLI (Unpack) must agree on.
//
// An archive is a tar stream (USTAR, PAX where a name needs it) of the
// workflow's `outputs:` paths, each with everything below it. Entries are
// named by their slash path relative to the checkout ("dist/",
// "dist/app.bin", "coverage.out"; directories end in "/"); parents come
// before children, siblings in byte order of their names, so the same tree
// always packs to the same entries in the same order. Regular files,
// directories and symbolic links only; permission bits and modification
// times (whole seconds) are kept; owners are not. Symbolic links are stored
// as links, never followed.
//
// Outputs are files, not logs: nothing in them is masked. It must never
// write outside the directory it unpacks to, follow a link while packing,
// or overwrite a file when unpacking.
package outputs
