package dockertest

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PostgresImage is JobImage with this machine's PostgreSQL (Debian's
// postgresql: server, initdb, psql and their libraries) and
// /usr/local/bin/pg-service, as the cluster's job-postgres image: a
// database on 127.0.0.1:5432 (a password from $POSTGRES_PASSWORD when
// set) for the services tests, and psql for their steps.
const PostgresImage = "localhost/knotless/job-postgres:2"

// pgService is PostgresImage's /usr/local/bin/pg-service (test/cluster's
// PGServiceScript).
const pgService = `#!/bin/sh
set -e
export TZ=UTC
D=/tmp/pgdata
rm -rf "$D"
if [ -n "$POSTGRES_PASSWORD" ]; then
	printf '%s' "$POSTGRES_PASSWORD" > /tmp/pw
	initdb -D "$D" -U postgres --no-locale -E UTF8 --auth-local=trust --auth-host=scram-sha-256 --pwfile=/tmp/pw > /tmp/initdb.log 2>&1 || { cat /tmp/initdb.log; exit 1; }
	rm -f /tmp/pw
else
	initdb -D "$D" -U postgres --no-locale -E UTF8 --auth=trust > /tmp/initdb.log 2>&1 || { cat /tmp/initdb.log; exit 1; }
fi
echo "pg-service: database initialized; starting the server on 127.0.0.1:${PGPORT:-5432}"
exec postgres -D "$D" -k /tmp -c listen_addresses=127.0.0.1 -c port="${PGPORT:-5432}" -c fsync=off -c shared_buffers=16MB -c jit=off
`

// EnsurePostgresImage imports PostgresImage into the engine unless it has
// it. Without PostgreSQL on this machine the test fails (CI's .ci/run
// installs it).
func (e *Engine) EnsurePostgresImage(t testing.TB) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	if imageDone[PostgresImage] {
		return PostgresImage
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		t.Fatal("no PostgreSQL on this machine for the job-postgres image: apt-get install postgresql")
	}
	dir := filepath.Dir(filepath.Dir(bins[len(bins)-1]))
	extra := map[string][]byte{"/usr/local/bin/pg-service": []byte(pgService)}
	libs := map[string]bool{}
	for _, root := range []string{dir, "/usr/share/postgresql/" + filepath.Base(dir)} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if strings.Contains(p, "/bitcode") || strings.Contains(p, "llvmjit") {
				// The JIT (and the LLVM library it loads, ~100 MB).
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(p) // a link's target's content
			if err != nil {
				return err
			}
			extra[p] = b
			if strings.Contains(p, "/bin/") || strings.HasSuffix(p, ".so") {
				out, _ := exec.Command("ldd", p).Output()
				for _, f := range strings.Fields(string(out)) {
					if strings.HasPrefix(f, "/") {
						libs[f] = true
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("PostgreSQL files: %v", err)
		}
	}
	for _, lib := range append(mapKeys(libs), "/usr/share/zoneinfo/UTC") {
		if b, err := os.ReadFile(lib); err == nil {
			extra[lib] = b
		}
	}
	path := "/usr/local/bin:" + dir + "/bin:/usr/bin:/bin"
	if err := e.importBusybox(context.Background(), PostgresImage, "1000:1000", path, extra); err != nil {
		t.Fatalf("job image %s: %v", PostgresImage, err)
	}
	imageDone[PostgresImage] = true
	return PostgresImage
}

func mapKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
