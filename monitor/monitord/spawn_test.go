package monitord

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDrain(t *testing.T) {
	for _, size := range []int{0, 1, 32 << 10, 1<<20 + 7} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		go func() { w.Write(want); w.Close() }()
		var got []byte
		if err := drain(r, func(p []byte) { got = append(got, p...) }); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		r.Close()
		if !bytes.Equal(got, want) {
			t.Errorf("%d bytes: got %d", size, len(got))
		}
	}
}

// TestExitedChild: the reaper sees an exited child without reaping it,
// so that a known one is left to its waiter.
func TestExitedChild(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for exitedChild() != pid {
		if time.Now().After(deadline) {
			t.Fatalf("exited child %d not seen (saw %d)", pid, exitedChild())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := exitedChild(); got != pid {
		t.Fatalf("looking reaped it: then %d", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child's own wait: %v", err)
	}
	if got := exitedChild(); got != 0 {
		t.Fatalf("after its wait: %d", got)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); err != unix.ECHILD {
		t.Fatalf("children left: %v", err)
	}
}
