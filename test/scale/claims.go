package scale

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"knotless.dev/knotless/internal/api"
)

// recordClaims makes the database keep a ledger of claims: a trigger on
// runs appends a row to scale_claims for every UPDATE that sets
// claimed_at, which only ClaimRun's compare-and-set does (sqlstore). The
// ledger holds every claim the database accepted, whichever replica made
// it and whether or not that replica lived to log it (a replica killed
// with SIGKILL may not have); a second claim of a run, which overwrites
// the run's runner_id and claimed_at, leaves a second row. Call it after
// the replicas migrated the database and before the first push.
func (w *world) recordClaims(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, w.dbURL)
	if err != nil {
		return fmt.Errorf("connect to the scenario's database: %w", err)
	}
	defer conn.Close(ctx)
	for _, stmt := range []string{
		`CREATE TABLE scale_claims (seq BIGSERIAL PRIMARY KEY, run_id BIGINT NOT NULL, runner_id BIGINT, state TEXT)`,
		`CREATE FUNCTION scale_record_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO scale_claims (run_id, runner_id, state) VALUES (NEW.id, NEW.runner_id, NEW.state);
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER scale_claims AFTER UPDATE OF claimed_at ON runs FOR EACH ROW EXECUTE FUNCTION scale_record_claim()`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("record claims in the database: %w", err)
		}
	}
	return nil
}

// checkClaims reads the ledger recordClaims keeps: sum.Claims is its
// size, ClaimedTwice the runs with more than one claim, NeverClaimed the
// runs that started with none (a ledger that saw nothing would otherwise
// pass),
// and a claim recorded under another runner than the run names is a
// second claim too.
func (w *world) checkClaims(ctx context.Context, sum *Summary, runs []api.Run) error {
	conn, err := pgx.Connect(ctx, w.dbURL)
	if err != nil {
		return fmt.Errorf("connect to the scenario's database: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT c.run_id, c.runner_id, c.state, r.runner_id FROM scale_claims c JOIN runs r ON r.id = c.run_id ORDER BY c.seq`)
	if err != nil {
		return fmt.Errorf("read the database's claims: %w", err)
	}
	claims := map[int64]int{}
	for rows.Next() {
		var run, runner, holder int64
		var state string
		if err := rows.Scan(&run, &runner, &state, &holder); err != nil {
			rows.Close()
			return fmt.Errorf("read the database's claims: %w", err)
		}
		sum.Claims++
		claims[run]++
		if state != api.StateClaimed || runner != holder {
			claims[run]++ // not ClaimRun's update, or the run changed hands: count it as claimed twice
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the database's claims: %w", err)
	}
	for id, n := range claims {
		if n > 1 {
			sum.ClaimedTwice = append(sum.ClaimedTwice, id)
		}
	}
	for _, r := range runs {
		if r.StartedAt != nil && claims[r.ID] == 0 {
			sum.NeverClaimed = append(sum.NeverClaimed, r.ID)
		}
	}
	slices.Sort(sum.ClaimedTwice)
	slices.Sort(sum.NeverClaimed)
	return nil
}
