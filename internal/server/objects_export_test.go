package server

import "context"

// SetObjectStoreHook makes the mover call f after each stage of a run's
// move ("uploaded", "recorded", "removed"); an error from f stops the
// move there, as a crash would.
func SetObjectStoreHook(c *ObjectStore, f func(run int64, stage string) error) { c.hook = f }

// RemoveRunBytes is removeRunBytes, for tests.
func RemoveRunBytes(ctx context.Context, s *Server, run int64) error {
	return s.removeRunBytes(ctx, run)
}

// Closing is closed once s begins to close (Close, or Serve's shutdown).
func Closing(s *Server) <-chan struct{} { return s.closing }
