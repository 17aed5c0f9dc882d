package agentenv

import (
	"context"
	"fmt"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
)

var _ executor.CacheFetcher = (*Session)(nil)

// FetchCache has the environment's step agent download src and unpack
// members (agent.Fetch: the agent hashes every byte, unpacks the listed
// members into their paths, removes what a failed fetch made, and gives
// up when no byte arrived for agent.DefaultFetchStall). An agent whose
// hello does not offer it gets nothing and the error wraps
// executor.ErrFetchUnsupported. Errors never quote src.URL's query (its
// signature).
func (s *Session) FetchCache(ctx context.Context, src executor.FetchSource, members map[string]string) ([]string, error) {
	done, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer s.end(done)
	got, err := s.cfg.Client.Fetch(ctx, agent.Fetch{URL: src.URL, SHA256: src.SHA256, Bytes: src.Bytes,
		Compression: src.Compression, Members: members})
	if err != nil {
		return nil, fmt.Errorf("fetch a cache into %s session %s: %w", s.cfg.Executor, s.cfg.ID, err)
	}
	return got.Members, nil
}
