package runner

import "knotless.dev/knotless/internal/api"

// CheckServerURL checks --server with api.CheckServerURL; its error matches
// ErrUsage.
func CheckServerURL(raw string) error {
	if err := api.CheckServerURL(raw); err != nil {
		return usagef("%v", err)
	}
	return nil
}
