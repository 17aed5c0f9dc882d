package server

import (
	"fmt"
	"testing"

	"knotless.dev/knotless/internal/store"
)

func TestStoreMessage_DropsTheSentinelTheStoreWrapped(t *testing.T) {
	err := fmt.Errorf("runner 12: %w", store.ErrNotFound)
	if got := storeMessage(err, store.ErrNotFound); got != "runner 12" {
		t.Errorf("storeMessage = %q, want %q", got, "runner 12")
	}
	err = fmt.Errorf("claim run 5: no longer queued: %w", store.ErrConflict)
	if got := storeMessage(err, store.ErrConflict); got != "claim run 5: no longer queued" {
		t.Errorf("storeMessage = %q", got)
	}
}
