package logship

import (
	"os"
	"testing"
)

// A checkpoint torn by a crash (one slot half written) leaves the one
// before it: the step's log is then resumed from a little further back,
// never from a wrong place.
func TestCheckpoints_TornWriteFallsBackToThePreviousCheckpoint(t *testing.T) {
	sp, err := CreateSpool(t.TempDir(), 7)
	if err != nil {
		t.Fatal(err)
	}
	w, err := sp.Checkpoints(1)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 5; i++ {
		if err := w.Save(Checkpoint{Raw: i * 100, Log: i * 90, Hidden: i%2 == 0}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if c, ok, err := sp.LastCheckpoint(1); err != nil || !ok || c != (Checkpoint{Raw: 500, Log: 450}) {
		t.Fatalf("last checkpoint %+v %v %v, want the fifth", c, ok, err)
	}
	// Tear the newest slot (sequence 5 is in slot 1).
	f, err := os.OpenFile(sp.checkpointPath(1), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff}, slotLen+10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if c, ok, err := sp.LastCheckpoint(1); err != nil || !ok || c != (Checkpoint{Raw: 400, Log: 360, Hidden: true}) {
		t.Fatalf("after a torn write: %+v %v %v, want the fourth", c, ok, err)
	}
	// Writing on continues after what the file holds.
	w, err = sp.Checkpoints(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Save(Checkpoint{Raw: 600, Log: 540}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if c, _, _ := sp.LastCheckpoint(1); c.Raw != 600 {
		t.Fatalf("after reopening: %+v, want raw 600", c)
	}
	if _, ok, err := sp.LastCheckpoint(2); ok || err != nil {
		t.Fatalf("a step without checkpoints: %v %v", ok, err)
	}
}
