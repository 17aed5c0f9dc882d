package executor

import (
	"fmt"

	"knotless.dev/knotless/internal/agent"
)

// CheckID returns nil when id is a valid Spec.ID: the protocol's one rule
// for IDs (agent.ValidID: 1-63 letters, digits, '.', '_' or '-', starting
// with a letter or digit, so that it names a directory, a container or,
// lower-cased, a pod). The error says the rule.
func CheckID(id string) error {
	if agent.ValidID(id) {
		return nil
	}
	return fmt.Errorf("the run ID %q is not valid: use %s", id, agent.IDRule)
}
