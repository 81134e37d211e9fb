package podproc

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runStdin runs a shell script with a stdin pipe.
func (p *pod) runStdin(id, script string, once bool) (pid int, logPath string) {
	p.t.Helper()
	dir := filepath.Join(p.dir, id)
	logPath = filepath.Join(p.dir, id+".log")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		p.t.Fatal(err)
	}
	pid, err := p.c.Run(ctxT(p.t), &RunRequest{ID: id, Dir: dir, LogPath: logPath, Stdin: true, StdinOnce: once,
		Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		p.t.Fatalf("run %s: %v", id, err)
	}
	p.mu.Lock()
	p.pids = append(p.pids, pid)
	p.mu.Unlock()
	return pid, logPath
}

// collect reads an attach session until its exit frame.
func collect(t *testing.T, a *AttachSession) (stdout, stderr string, code int) {
	t.Helper()
	var out, errs bytes.Buffer
	for {
		typ, data, exit, err := a.Read()
		if err != nil {
			t.Fatalf("attach read: %v (so far stdout %q stderr %q)", err, out.String(), errs.String())
		}
		switch typ {
		case FrameStdout:
			out.Write(data)
		case FrameStderr:
			errs.Write(data)
		case FrameExit:
			return out.String(), errs.String(), exit.Code
		}
	}
}

// TestAttach: input reaches the process's stdin, its output reaches each
// attached client on the streams it asked for (and the log), the exit
// ends every session, and stdin-once closes the stdin when the first
// client with stdin says so.
func TestAttach(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	_, logPath := p.runStdin("cat", "while read l; do echo out:$l; echo err:$l >&2; done; echo bye; exit 4", true)
	a, err := p.c.Attach(ctx, &AttachRequest{ID: "cat", Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := p.c.Attach(ctx, &AttachRequest{ID: "cat", Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.Write([]byte("one\ntwo\n")); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	out, errs, code := collect(t, a)
	if out != "out:one\nout:two\nbye\n" || errs != "err:one\nerr:two\n" || code != 4 {
		t.Fatalf("attached with all streams: stdout %q stderr %q code %d", out, errs, code)
	}
	out, errs, code = collect(t, b)
	if out != "" || errs != "err:one\nerr:two\n" || code != 4 {
		t.Fatalf("attached with stderr: stdout %q stderr %q code %d", out, errs, code)
	}
	if got := strings.Join(lines(readLog(t, logPath), "stdout"), "|"); got != "out:one|out:two|bye" {
		t.Fatalf("log: %q", got)
	}
	if _, err := p.c.Attach(ctx, &AttachRequest{ID: "cat", Stdout: true}); !IsCode(err, CodeNotRunning) {
		t.Fatalf("attach to an exited process: %v", err)
	}
	if _, err := p.c.Attach(ctx, &AttachRequest{ID: "nope"}); !IsCode(err, CodeNotFound) {
		t.Fatalf("attach to nothing: %v", err)
	}
	shutdown(t, p)
}

// TestAttachStdinOnceOnDetach: a client with stdin that hangs up ends a
// stdin-once process's input; without stdin-once it stays open for the
// next client.
func TestAttachStdinOnceOnDetach(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	p.runStdin("once", "cat >/dev/null; echo eof", true)
	p.runStdin("many", "cat; echo eof", false)
	for _, id := range []string{"once", "many"} {
		a, err := p.c.Attach(ctx, &AttachRequest{ID: id, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		a.Write([]byte("x\n"))
		a.Close()
	}
	st, err := p.c.Wait(ctx, "once")
	if err != nil || st.Exit.Code != 0 {
		t.Fatalf("stdin-once process after its client detached: %+v %v", st, err)
	}
	time.Sleep(200 * time.Millisecond)
	if st, err := p.c.Status(ctx, "many"); err != nil || st.State != StateRunning {
		t.Fatalf("a process without stdin-once after its client detached: %+v %v", st, err)
	}
	a, err := p.c.Attach(ctx, &AttachRequest{ID: "many", Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Write([]byte("again\n"))
	typ, data, _, err := a.Read()
	if err != nil || typ != FrameStdout || string(data) != "again\n" {
		t.Fatalf("second client: %v %q %v", typ, data, err)
	}
}

// TestAttachSlowClientAndStdinBackpressure: a client that reads nothing
// is cut off, never making the process wait; input the process does not
// read yet waits in the pod process without blocking it, and all of it
// arrives.
func TestAttachSlowClientAndStdinBackpressure(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	p.run("loud", "head -c 20000000 /dev/zero; echo done >&2")
	slow, err := p.c.Attach(ctx, &AttachRequest{ID: "loud", Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	start := time.Now()
	st, err := p.c.Wait(ctx, "loud")
	if err != nil || st.Exit.Code != 0 {
		t.Fatalf("writer with a client that reads nothing: %+v %v after %s", st, err, time.Since(start))
	}
	// Cut off: what it got ends without an exit.
	for {
		typ, _, _, err := slow.Read()
		if err != nil {
			break
		}
		if typ == FrameExit {
			t.Fatal("the slow client was not cut off")
		}
	}

	// 4 MiB of input to a process that reads none for a while.
	_, logPath := p.runStdin("late", "sleep 1; wc -c", true)
	a, err := p.c.Attach(ctx, &AttachRequest{ID: "late", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	wrote := make(chan error, 1)
	go func() {
		_, err := a.Write(bytes.Repeat([]byte("y"), 4<<20))
		if err == nil {
			err = a.CloseStdin()
		}
		wrote <- err
	}()
	time.Sleep(200 * time.Millisecond)
	// Meanwhile the pod process answers.
	t0 := time.Now()
	if _, err := p.c.Ping(ctx); err != nil || time.Since(t0) > time.Second {
		t.Fatalf("ping while input waits: %v after %s", err, time.Since(t0))
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if st, err := p.c.Wait(ctx, "late"); err != nil || st.Exit.Code != 0 {
		t.Fatalf("reader: %+v %v", st, err)
	}
	if got := strings.Join(lines(readLog(t, logPath), "stdout"), "|"); strings.TrimSpace(got) != "4194304" {
		t.Fatalf("input that arrived: %q bytes", got)
	}
}
