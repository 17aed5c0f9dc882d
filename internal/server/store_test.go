package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// The server is handed its store and leaves it to the caller: the admin
// account New makes on first start is in that store, and neither Close
// nor a New that failed (the directory was in use) closes it, so the
// caller can still read it and start the next server with it.
func TestNew_UsesTheStoreItIsHandedAndLeavesClosingItToTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := servertest.OpenStore(t, dir, "")
	cfg := server.Config{DataDir: dir, Listen: "127.0.0.1:0", URL: "http://127.0.0.1:1", Store: st,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	first, err := server.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(ctx, cfg); !errors.As(err, new(*server.InUseError)) {
		t.Fatalf("second New on a held directory: err = %v, want an *InUseError", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AccountByHandle(ctx, server.AdminHandle); err != nil {
		t.Fatalf("the caller's store after Close: admin account: %v (want it there, and the store open)", err)
	}
	next, err := server.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New again with the same store: %v", err)
	}
	next.Close()
}

func TestNew_WithoutAStoreIsRefused(t *testing.T) {
	t.Parallel()
	srv, err := server.New(context.Background(), server.Config{DataDir: t.TempDir()})
	if err == nil {
		srv.Close()
		t.Fatal("New without a Store started")
	}
	if !strings.Contains(err.Error(), "Config.Store is nil") {
		t.Errorf("err = %v, want one naming Config.Store", err)
	}
}
