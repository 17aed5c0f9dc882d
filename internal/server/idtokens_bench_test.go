package server_test

import (
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// BenchmarkIDTokens_MintBesideHeartbeat measures what minting costs the
// server, through the real XRPC path (runner JWT checked, run and workflow
// read, claims made, RS256 signature): tokens per second beside the same
// runner's heartbeats per second (the baseline: a runner call that signs
// nothing), in one run. Run with -cpu 1 for one core:
//
//	go test ./internal/server -run '^$' -bench IDTokens -cpu 1 -benchtime 200x
func BenchmarkIDTokens_MintBesideHeartbeat(b *testing.B) {
	f := servertest.Start(b, servertest.Options{})
	tok := f.CreateAccount(b, "alice")
	f.CreateRepo(b, tok, "app")
	r := f.RegisterRunner(b, "alice/app", "bench", nil, true)
	f.Push(b, "alice/app", tok, map[string]string{".knotless/workflows/deploy.yml": idWorkflow("https://kube.example")}, "main")
	var out api.ClaimOutput
	if err := r.Client.Procedure(b.Context(), api.MethodClaim, api.ClaimInput{Wait: 5}, &out); err != nil || out.Run == nil {
		b.Fatalf("claim: %v", err)
	}
	run := out.Run.Run.ID
	rc := api.NewRunnerClient(r.Client)
	b.Run("baseline=heartbeat", func(b *testing.B) {
		for b.Loop() {
			if _, err := rc.Heartbeat(b.Context(), run); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	})
	b.Run("mint", func(b *testing.B) {
		at := time.Now()
		for b.Loop() {
			if _, err := rc.IDTokens(b.Context(), api.IDTokensInput{Run: run, Step: 1, Names: []string{"DEPLOY"}, IssuedAt: at}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
}
