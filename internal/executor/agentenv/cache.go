package agentenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor"
)

var _ executor.Cacher = (*Session)(nil)

// Home returns $HOME as the agent's hello gives it.
func (s *Session) Home(ctx context.Context) (string, error) {
	done, err := s.begin(ctx)
	if err != nil {
		return "", err
	}
	defer s.end(done)
	h, err := s.cfg.Client.Connect(ctx)
	if err != nil {
		return "", fmt.Errorf("%s session %s: %w", s.cfg.Executor, s.cfg.ID, err)
	}
	if h.Home == "" {
		return "", fmt.Errorf("%s session %s: the step agent did not say where HOME is", s.cfg.Executor, s.cfg.ID)
	}
	return h.Home, nil
}

// RestoreCache puts src (on the host) at dst (absolute, as the steps see
// it). Where the host sees dst (Env.HostPath: the shell and docker executors), it
// copies on the host (extent clones where the file system can); otherwise
// it streams through the agent, compressed with zstd when the agent
// speaks it, with the stream's length and SHA-256 compared by both ends.
func (s *Session) RestoreCache(ctx context.Context, src, dst string) error {
	done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer s.end(done)
	if s.cfg.Env.HostPath != nil {
		if hp, root, ok := s.cfg.Env.HostPath(dst); ok {
			if err := cache.CheckBelow(root, hp); err != nil {
				return fmt.Errorf("restore cache to %s: %w", dst, err)
			}
			if err := cache.CopyTree(src, hp); err != nil {
				return fmt.Errorf("restore cache to %s: %w", dst, err)
			}
			if s.cfg.Env.HostChown != nil {
				if err := s.cfg.Env.HostChown(hp); err != nil {
					return fmt.Errorf("restore cache to %s: %w", dst, err)
				}
			}
			return nil
		}
	}
	req := agent.CopyIn{Dst: dst, Compression: s.compression(ctx)}
	_, err = s.cfg.Client.CopyInWith(ctx, req, func(w io.Writer) error {
		return agent.WriteTar(ctx, w, agent.HostTree{}, src)
	})
	if err != nil {
		return fmt.Errorf("restore cache into %s session %s at %s: %w", s.cfg.Executor, s.cfg.ID, dst, err)
	}
	return nil
}

// SaveCache puts src (absolute, as the steps see it) at stage on the host.
// Where the host sees src, it renames it (the environment is about to be
// removed), or copies when stage is on another file system; otherwise it
// streams through the agent like RestoreCache. A missing src wraps
// fs.ErrNotExist.
func (s *Session) SaveCache(ctx context.Context, src, stage string) error {
	done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer s.end(done)
	if s.cfg.Env.HostPath != nil {
		if hp, root, ok := s.cfg.Env.HostPath(src); ok {
			if err := cache.CheckBelow(root, hp); err != nil {
				return fmt.Errorf("save cache %s: %w", src, err)
			}
			if _, err := os.Lstat(hp); err != nil {
				return fmt.Errorf("save cache %s: %w", src, err)
			}
			if _, err := cache.MoveTree(hp, stage); err != nil {
				return fmt.Errorf("save cache %s: %w", src, err)
			}
			return nil
		}
	}
	stage = filepath.Clean(stage)
	req := agent.CopyOut{Src: src, Compression: s.compression(ctx)}
	err = s.cfg.Client.CopyOutWith(ctx, req, func(r io.Reader) error {
		// A retried attempt starts from nothing.
		if err := cleanup.RemoveAll(stage, nil); err != nil {
			return err
		}
		_, err := agent.ExtractTar(ctx, r, agent.HostTree{}, stage)
		return err
	})
	if err != nil {
		return fmt.Errorf("save cache %s from %s session %s: %w", src, s.cfg.Executor, s.cfg.ID, err)
	}
	return nil
}

// streamCompression is CopyIn's and CopyOut's: compression where the
// environment asks for it (Env.Compress), else none.
func (s *Session) streamCompression(ctx context.Context) string {
	if !s.cfg.Env.Compress {
		return ""
	}
	return s.compression(ctx)
}

// compression is zstd when the agent speaks it.
func (s *Session) compression(ctx context.Context) string {
	if h, err := s.cfg.Client.Connect(ctx); err == nil && h.Speaks(agent.CompressionZstd) {
		return agent.CompressionZstd
	}
	return ""
}
