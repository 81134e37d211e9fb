package monitord_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/monitor"
)

func (e *env) running(id string, cfg *runtimeapi.ContainerConfig) {
	e.t.Helper()
	e.create(id, cfg)
	e.call(&monitor.Request{Op: monitor.OpStart, ID: id})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestExecStreamPipes(t *testing.T) {
	e := start(t)
	e.running("c1", &runtimeapi.ContainerConfig{Command: []string{"sleep", "1000"}})
	s, err := e.client.ExecStream(ctx(t), "c1", &monitor.StreamRequest{
		Args:  []string{"sh", "-c", "read x; echo out:$x; echo err:$x >&2; exit 3"},
		Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stdin, stdout, stderr := s.Files[0], s.Files[1], s.Files[2]
	stdin.WriteString("hello\n")
	stdin.Close()
	out, _ := io.ReadAll(stdout)
	errOut, _ := io.ReadAll(stderr)
	if string(out) != "out:hello\n" || string(errOut) != "err:hello\n" {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	exit, err := s.Wait(ctx(t))
	if err != nil || exit.Code != 3 {
		t.Fatalf("exit %+v %v", exit, err)
	}
}

func TestExecStreamTTY(t *testing.T) {
	e := start(t)
	e.running("c1", &runtimeapi.ContainerConfig{Command: []string{"sleep", "1000"}})
	s, err := e.client.ExecStream(ctx(t), "c1", &monitor.StreamRequest{
		Args: []string{"sh", "-c", "stty size; read x; echo got:$x"}, Stdin: true, Stdout: true, TTY: true, Width: 100, Height: 40,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Files) != 1 {
		t.Fatalf("%d files", len(s.Files))
	}
	master := s.Files[0]
	var buf bytes.Buffer
	readUntil(t, master, &buf, "40 100")
	master.WriteString("abc\n")
	readUntil(t, master, &buf, "got:abc")
	if exit, err := s.Wait(ctx(t)); err != nil || exit.Code != 0 {
		t.Fatalf("exit %+v %v", exit, err)
	}
}

// readUntil reads r into buf until it holds want, for 10 s at most.
func readUntil(t *testing.T, r io.Reader, buf *bytes.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	p := make([]byte, 4096)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in %q", want, buf.String())
		}
		n, err := r.Read(p)
		buf.Write(p[:n])
		if err != nil && !strings.Contains(buf.String(), want) {
			t.Fatalf("read: %v; have %q, want %q", err, buf.String(), want)
		}
	}
}

func TestExecStreamHangupKills(t *testing.T) {
	e := start(t)
	e.running("c1", &runtimeapi.ContainerConfig{Command: []string{"sleep", "1000"}})
	s, err := e.client.ExecStream(ctx(t), "c1", &monitor.StreamRequest{Args: []string{"sleep", "1000"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Files[0].Close()
	s.Close()
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(s.Pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("exec'd process %d still runs after berth hung up", s.Pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// frames collects attach frames until an exit frame or want appears in
// the given stream.
type frames struct {
	t              *testing.T
	a              *monitor.AttachSession
	stdout, stderr bytes.Buffer
	exit           *monitor.Exit
}

func (f *frames) until(cond func() bool) {
	f.t.Helper()
	done := make(chan error, 1)
	go func() {
		for !cond() {
			kind, payload, err := f.a.ReadFrame()
			if err != nil {
				done <- err
				return
			}
			switch kind {
			case monitor.FrameStdout:
				f.stdout.Write(payload)
			case monitor.FrameStderr:
				f.stderr.Write(payload)
			case monitor.FrameExit:
				f.exit = &monitor.Exit{}
				json.Unmarshal(payload, f.exit)
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			f.t.Fatalf("read frame: %v (stdout %q, stderr %q)", err, f.stdout.String(), f.stderr.String())
		}
	case <-time.After(10 * time.Second):
		f.t.Fatalf("timed out (stdout %q, stderr %q)", f.stdout.String(), f.stderr.String())
	}
}

func TestAttachStdinOnce(t *testing.T) {
	e := start(t)
	e.running("c1", &runtimeapi.ContainerConfig{
		Command: []string{"sh", "-c", `while read l; do echo "echo:$l"; echo "err:$l" >&2; done; echo bye`},
		Stdin:   true, StdinOnce: true,
	})
	a, err := e.client.Attach(ctx(t), "c1", &monitor.StreamRequest{Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	f := &frames{t: t, a: a}
	a.WriteFrame(monitor.FrameStdin, []byte("a\n"))
	f.until(func() bool {
		return strings.Contains(f.stdout.String(), "echo:a\n") && strings.Contains(f.stderr.String(), "err:a\n")
	})
	a.WriteFrame(monitor.FrameStdinClose, nil)
	f.until(func() bool { return f.exit != nil })
	if f.exit.Code != 0 || !strings.HasSuffix(f.stdout.String(), "bye\n") {
		t.Fatalf("exit %+v, stdout %q", f.exit, f.stdout.String())
	}
	log, _ := os.ReadFile(e.state + "/containers/c1/log")
	if !strings.Contains(string(log), "stdout F echo:a") {
		t.Fatalf("the log lost what attach saw:\n%s", log)
	}
}

func TestAttachTTYResize(t *testing.T) {
	e := start(t)
	e.running("c1", &runtimeapi.ContainerConfig{Command: []string{"sh"}, Stdin: true, Tty: true})
	a, err := e.client.Attach(ctx(t), "c1", &monitor.StreamRequest{Stdin: true, Stdout: true, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	f := &frames{t: t, a: a}
	a.WriteFrame(monitor.FrameResize, monitor.ResizePayload(120, 50))
	a.WriteFrame(monitor.FrameStdin, []byte("stty size\n"))
	f.until(func() bool { return strings.Contains(f.stdout.String(), "50 120") })
	a.WriteFrame(monitor.FrameStdin, []byte("exit 4\n"))
	f.until(func() bool { return f.exit != nil })
	if f.exit.Code != 4 {
		t.Fatalf("exit %+v", f.exit)
	}
	if _, err := e.client.Attach(ctx(t), "c1", &monitor.StreamRequest{Stdout: true}); !monitor.IsCode(err, monitor.CodeNotRunning) {
		t.Fatalf("attach to an exited container: %v", err)
	}
}
