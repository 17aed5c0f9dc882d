//go:build race

package e2e

// raceEnabled: the test binary was built with -race, so TestMain builds the
// programs with -race too and every process log is checked for data races.
const raceEnabled = true
