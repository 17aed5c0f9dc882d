package builder

import (
	"strings"
	"syscall"
	"testing"

	"knotless.dev/knotless/internal/testenv"
)

// TestIDMaps_HostIDsMapsTheRangeNotTheContainersRoot pins the daemon's
// maps: without HostIDs every id of the current namespace to itself (a
// pod's); with it 0-65535 to HostIDs.., so that the daemon's root is not
// the current namespace's (a docker container's, the host's); and a
// range the current namespace does not have is refused, saying why.
func TestIDMaps_HostIDsMapsTheRangeNotTheContainersRoot(t *testing.T) {
	n, err := mapSize("/proc/self/uid_map")
	if err != nil {
		t.Fatal(err)
	}
	uids, gids, err := idMaps(0)
	if err != nil || len(uids) != 1 || uids[0] != (syscall.SysProcIDMap{ContainerID: 0, HostID: 0, Size: n}) || len(gids) != 1 || gids[0].HostID != 0 {
		t.Errorf("idMaps(0) = %v %v %v; want every id to itself", uids, gids, err)
	}
	if n < 1<<30+HostIDsSize {
		testenv.Skipf(t, "this process's namespace maps %d ids: too few for a host range (run as root outside a user namespace)", n)
	}
	uids, gids, err = idMaps(1 << 30)
	want := syscall.SysProcIDMap{ContainerID: 0, HostID: 1 << 30, Size: HostIDsSize}
	if err != nil || len(uids) != 1 || uids[0] != want || len(gids) != 1 || gids[0] != want {
		t.Errorf("idMaps(2^30) = %v %v %v; want %v", uids, gids, err, want)
	}
	if _, _, err := idMaps(n - 10); err == nil || !strings.Contains(err.Error(), "--host-ids") {
		t.Errorf("idMaps past the namespace's ids: %v; want an error naming --host-ids", err)
	}
}
