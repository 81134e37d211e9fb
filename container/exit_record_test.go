package container

import (
	"testing"
	"time"

	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/monitor"
)

// An exit is on disk once it is announced: RemoveContainer waits for the
// exit and then deletes the record, so an exit written after that would
// bring back the record of a removed container (found by test/faults'
// TestLoad as a leaked file in container-records).
func TestExitRecordedBeforeAnnounced(t *testing.T) {
	s := newTestService(t)
	for range 200 {
		id := reserve.NewID()
		c := &ctr{rec: Record{ID: id, State: StateRunning}, exited: make(chan struct{})}
		if err := s.records.Put(id, &c.rec); err != nil {
			t.Fatal(err)
		}
		go s.setExit(c, &monitor.Exit{Code: 0, FinishedAt: time.Now()}, "")
		<-c.exited
		rec, err := s.records.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != StateExited {
			t.Fatalf("container %s: record says %s when the exit is announced, want %s", id, rec.State, StateExited)
		}
	}
}
