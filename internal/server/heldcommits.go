package server

import (
	"context"
	"strconv"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// Fetches get only objects some ref reaches (uploadpack.allowReachableSHA1InWant,
// protocol v0 only: see uploadpack.go): a commit that a force-push or a
// deleted branch left behind, a secret committed and taken back say, is
// not served to anyone. Runs fetch their commit by SHA, though, and a
// queued run's commit may stop being reachable from its branch. So a
// pipeline with a run not yet final holds its commit under a hidden ref,
// refs/knotless/pipelines/<id>: clients neither see it nor push to it
// (transfer.hideRefs), yet it counts as reachable. It is deleted when the
// pipeline's last run ends (releasePipeline), and by the next push to the
// repository when that was missed (pruneHeldCommits).

// hiddenRefs is the ref namespace clients neither see nor update.
const hiddenRefs = "refs/knotless/"

// pipelineRefs holds one ref per pipeline with a run not yet final.
const pipelineRefs = hiddenRefs + "pipelines/"

// serveConfig is the git configuration of every upload-pack and
// receive-pack the server runs, over each repository's own.
var serveConfig = [][2]string{
	{"uploadpack.allowAnySHA1InWant", "false"},
	{"uploadpack.allowReachableSHA1InWant", "true"},
	{"transfer.hideRefs", hiddenRefs},
}

// serveConfigArgs is serveConfig as `git -c` options.
func serveConfigArgs() []string {
	var args []string
	for _, kv := range serveConfig {
		args = append(args, "-c", kv[0]+"="+kv[1])
	}
	return args
}

func pipelineRef(id int64) string { return pipelineRefs + strconv.FormatInt(id, 10) }

// holdPipelineCommit makes the hidden ref of a pipeline just created,
// unless its runs are all final already.
func (s *Server) holdPipelineCommit(ctx context.Context, repo store.Repo, p store.Pipeline, runs []store.Run) {
	if allFinal(runs) {
		return
	}
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		s.log.Error("hold the commit of a pipeline", "pipeline", p.ID, "repo", repo.FullName(), "err", err)
		return
	}
	if _, err := s.git(ctx, dir, "update-ref", pipelineRef(p.ID), p.SHA); err != nil {
		s.log.Error("hold the commit of a pipeline", "pipeline", p.ID, "repo", repo.FullName(), "err", err)
		return
	}
	// Its runs may all have ended meanwhile, before the ref was there for
	// releasePipeline to delete.
	s.releasePipeline(ctx, p.ID, repo.FullName())
}

// releasePipeline deletes the hidden ref of pipeline id of repository
// full ("OWNER/NAME") once its runs are all final. Call it whenever one
// of its runs ended.
func (s *Server) releasePipeline(ctx context.Context, id int64, full string) {
	ctx = context.WithoutCancel(ctx)
	runs, err := s.store.ListRuns(ctx, store.RunFilter{PipelineID: id, Limit: 1 << 20})
	if err != nil {
		s.log.Error("release the commit of a pipeline", "pipeline", id, "err", err)
		return
	}
	if !allFinal(runs) {
		return
	}
	owner, name, _ := strings.Cut(full, "/")
	dir, err := s.repoDir(owner, name)
	if err != nil {
		s.log.Error("release the commit of a pipeline", "pipeline", id, "repo", full, "err", err)
		return
	}
	if _, err := s.git(ctx, dir, "update-ref", "-d", pipelineRef(id)); err != nil {
		s.log.Warn("release the commit of a pipeline", "pipeline", id, "repo", full, "err", err)
	}
}

// runEnded releases what run's pipeline held once run is final.
func (s *Server) runEnded(ctx context.Context, run store.Run) {
	if api.IsFinal(run.State) {
		s.metrics.runFinished(run)
		s.followups(ctx, run) // before the release: a retry keeps the pipeline open
		s.releasePipeline(ctx, run.PipelineID, run.Repo)
		s.groupFreed(ctx, run)
	}
}

// pruneHeldCommits deletes the hidden refs among refs whose pipelines
// ended (a release missed by a crash, or by a failed git).
func (s *Server) pruneHeldCommits(ctx context.Context, repo store.Repo, refs map[string]string) {
	for ref := range refs {
		id, err := strconv.ParseInt(strings.TrimPrefix(ref, pipelineRefs), 10, 64)
		if !strings.HasPrefix(ref, pipelineRefs) || err != nil {
			continue
		}
		s.releasePipeline(ctx, id, repo.FullName())
	}
}

func allFinal(runs []store.Run) bool {
	for _, r := range runs {
		if !api.IsFinal(r.State) {
			return false
		}
	}
	return true
}
