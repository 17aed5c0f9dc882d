package stepagent

import (
	"context"
	"sync"
	"time"

	"knotless.dev/knotless/internal/agent"
)

// capabilities are the requests beyond the first protocol this agent
// serves (agent.AgentHello.Capabilities).
var capabilities = []string{agent.CapabilityFetch}

// fetchMu keeps fetches one at a time (one Agent per process): a client
// that lost its connection mid-fetch and sends the request again waits
// until the first fetch, ended with its connection, removed what it made.
var fetchMu sync.Mutex

// fetchHTTP is the agent's HTTP client for fetches, made on first use.
var fetchHTTP = sync.OnceValue(agent.NewFetchHTTPClient)

// fetch serves a Fetch (agent.RunFetch) and answers Fetched; the fetch
// ends with its connection or the agent's shutdown. It returns false when
// the connection is to be ended (a request that does not decode, or the
// answer could not be sent).
func (h *connHandler) fetch(f agent.Frame) bool {
	req, ok := decode[agent.Fetch](h, f)
	if !ok {
		return false
	}
	if err := agent.CheckFetch(req); err != nil {
		h.fail(f.Type, "", err)
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.cn.Done():
		case <-h.a.shutdown:
		case <-ctx.Done():
		}
		cancel()
	}()
	fetchMu.Lock()
	defer fetchMu.Unlock()
	start := time.Now()
	res := agent.RunFetch(ctx, req, fetchHTTP())
	took := time.Since(start).Round(time.Millisecond)
	if res.Error != "" {
		h.a.log.Warn("fetching an archive failed", "bytes", res.Bytes, "took", took, "err", res.Error)
	} else {
		h.a.log.Info("fetched an archive", "bytes", res.Bytes, "files", res.Files, "members", res.Members, "took", took)
	}
	return h.cn.WriteJSON(agent.TypeFetched, res) == nil
}
