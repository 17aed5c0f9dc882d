// Package units is Knotless's one home for amounts written by people:
// byte sizes and CPU amounts in Kubernetes quantity syntax, how they are
// parsed and how sizes are printed back. The workflow format
// (resources: memory, disk), the runners' and server's flags
// (internal/envflag.Size) and the executors' messages all use it, so a
// size means the same everywhere.
//
// A quantity is a decimal number ("1000", "1.5", "2e3", no sign but an
// optional "+") followed by an optional suffix:
//
//   - byte sizes (ParseSize): binary Ki, Mi, Gi, Ti, Pi, Ei (powers of
//     1024) or decimal k, M, G, T, P, E (powers of 1000); no suffix is
//     bytes. "10MiB", "4GB" and "10K" are refused (envflag accepts the
//     IEC spellings for flags by dropping the B). FormatSize prints a
//     size so that ParseSize reads it back ("2Gi", "1536Mi", "1000000").
//   - CPU amounts (ParseCPUs): whole or fractional CPUs ("2", "0.5") or
//     millicores ("500m"), returned in millicores.
//
// Errors are plain errors (no sentinel values) whose text quotes the
// input and says what was expected, for showing to the person who wrote
// it. Nothing here allocates much whatever the input: digits and
// exponents are bounded.
//
// It must stay a leaf: the standard library only, no knowledge of who
// uses a quantity or what limits apply to it.
package units
