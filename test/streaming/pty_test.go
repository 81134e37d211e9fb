package streaming_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// terminal runs a command on a new pseudo-terminal, as its controlling
// terminal, and records everything it prints.
type terminal struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	done   chan struct{} // closed when the command has exited
	err    error
}

func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

func startOnTerminal(t *testing.T, cmd *exec.Cmd, cols, rows uint16) *terminal {
	t.Helper()
	master, slave := openPTY(t)
	tm := &terminal{t: t, master: master, cmd: cmd, done: make(chan struct{})}
	tm.resize(cols, rows)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		tm.err = cmd.Wait()
		close(tm.done)
	}()
	t.Cleanup(func() {
		select {
		case <-tm.done:
		default:
			cmd.Process.Kill()
			<-tm.done
		}
		master.Close()
	})
	return tm
}

func (tm *terminal) resize(cols, rows uint16) {
	if err := unix.IoctlSetWinsize(int(tm.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
		tm.t.Fatal(err)
	}
}

func (tm *terminal) output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

func (tm *terminal) send(s string) {
	if _, err := tm.master.WriteString(s); err != nil {
		tm.t.Fatal(err)
	}
}

// expect waits until the output holds want after the first from bytes.
func (tm *terminal) expect(from int, want string) int {
	tm.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := tm.output()
		if i := strings.Index(out[from:], want); i >= 0 {
			return from + i + len(want)
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("no %q in the terminal's output after %d bytes:\n%q", want, from, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// askSize asks the shell for its size ("stty size") until the output
// after the first from bytes shows rows and cols: a size change reaches
// the shell asynchronously. what names the change in the failure.
func (tm *terminal) askSize(from int, cols, rows uint16, what string) {
	tm.t.Helper()
	want := fmt.Sprintf("%d %d", rows, cols)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(tm.output()[from:], want) {
		if time.Now().After(deadline) {
			tm.t.Fatalf("%s not seen:\n%q", what, tm.output())
		}
		tm.send("stty size\n")
		time.Sleep(200 * time.Millisecond)
	}
}

// wait waits for the command to exit and returns its error.
func (tm *terminal) wait() error {
	tm.t.Helper()
	select {
	case <-tm.done:
		return tm.err
	case <-time.After(15 * time.Second):
		tm.t.Fatalf("still running after 15s; output:\n%q", tm.output())
		return nil
	}
}
