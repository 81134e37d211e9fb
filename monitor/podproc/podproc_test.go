package podproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-runtime/berth/monitor"
)

// The C builds (csrc/Makefile) are made once per test binary, in a temp
// dir TestMain removes.
var (
	buildDir  string
	buildOnce sync.Map // target → *buildResult
)

type buildResult struct {
	once sync.Once
	path string
	skip string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "podproc-build-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build makes one of csrc/Makefile's targets, skipping the test where the
// tools are missing.
func build(t *testing.T, target string) string {
	t.Helper()
	v, _ := buildOnce.LoadOrStore(target, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() {
		for _, tool := range []string{"gcc", "make"} {
			if _, err := exec.LookPath(tool); err != nil {
				r.skip = tool + " is not installed: the pod process is C"
				return
			}
		}
		cmd := exec.Command("make", "-s", "-C", "csrc", "OUT="+buildDir, filepath.Join(buildDir, target))
		out, err := cmd.CombinedOutput()
		if err != nil {
			if bytes.Contains(out, []byte("lasan")) || bytes.Contains(out, []byte("lubsan")) {
				r.skip = "gcc's sanitizer runtimes are not installed: " + string(out)
				return
			}
			r.err = fmt.Errorf("make %s: %v\n%s", target, err, out)
			return
		}
		r.path = filepath.Join(buildDir, target)
	})
	if r.skip != "" {
		t.Skip(r.skip)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

// TestCUnit runs the C unit tests of the parser and the log writer, built
// with ASan and UBSan.
func TestCUnit(t *testing.T) {
	out, err := exec.Command(build(t, "unit"), t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("unit: %v\n%s", err, out)
	}
}

// TestCFuzzRandom feeds the parser, built with ASan and UBSan, mutations
// of valid frames (libFuzzer, with clang: make -C csrc fuzz).
func TestCFuzzRandom(t *testing.T) {
	n := "300000"
	if testing.Short() {
		n = "30000"
	}
	out, err := exec.Command(build(t, "fuzz-random"), n, strconv.FormatInt(time.Now().UnixNano(), 10)).CombinedOutput()
	if err != nil {
		t.Fatalf("fuzz-random: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// pod is one pod process under test. Its cleanup kills it and every
// process group it ran, and reaps it.
type pod struct {
	t    *testing.T
	proc *os.Process
	sock string
	dir  string
	c    *Client
	mu   sync.Mutex
	pids []int
}

func startPod(t *testing.T) *pod {
	t.Helper()
	bin := build(t, BinaryName)
	dir := t.TempDir()
	p := &pod{t: t, sock: filepath.Join(dir, "pp.sock"), dir: dir}
	logf, err := os.Create(filepath.Join(dir, "podproc.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.proc, err = Start(ctx, StartOptions{Binary: bin, PodID: "pod-" + t.Name(), Socket: p.sock, Log: logf})
	if err != nil {
		t.Fatal(err)
	}
	p.c = &Client{Socket: p.sock}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		// Each process it ran leads a session and group of its own.
		for _, pid := range p.pids {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
		p.proc.Kill()
		p.proc.Wait()
		if t.Failed() {
			if data, err := os.ReadFile(filepath.Join(dir, "podproc.log")); err == nil {
				t.Logf("podproc's log:\n%s", data)
			}
		}
	})
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run runs a shell script as process id, logging to <dir>/id.log.
func (p *pod) run(id, script string) (pid int, dir, logPath string) {
	p.t.Helper()
	dir = filepath.Join(p.dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		p.t.Fatal(err)
	}
	logPath = filepath.Join(p.dir, id+".log")
	pid, err := p.c.Run(ctxT(p.t), &RunRequest{ID: id, Dir: dir, LogPath: logPath,
		Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		p.t.Fatalf("run %s: %v", id, err)
	}
	p.mu.Lock()
	p.pids = append(p.pids, pid)
	p.mu.Unlock()
	return pid, dir, logPath
}

type record struct{ stream, tag, text string }

// readLog parses a CRI log file, checking every record's form.
func readLog(t *testing.T, path string) []record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []record
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" {
			continue
		}
		if !strings.HasSuffix(line, "\n") {
			t.Fatalf("log %s: record without a newline: %q", path, line)
		}
		parts := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 4)
		if len(parts) != 4 {
			t.Fatalf("log %s: malformed record %q", path, line)
		}
		ts, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil || time.Since(ts) > time.Minute || time.Until(ts) > time.Second {
			t.Fatalf("log %s: bad time in %q: %v", path, line, err)
		}
		if (parts[1] != "stdout" && parts[1] != "stderr") || (parts[2] != "P" && parts[2] != "F") {
			t.Fatalf("log %s: malformed record %q", path, line)
		}
		recs = append(recs, record{parts[1], parts[2], parts[3]})
	}
	return recs
}

// lines joins P records to their F, per stream, as the kubelet does.
func lines(recs []record, stream string) []string {
	var out []string
	cur := ""
	for _, r := range recs {
		if r.stream != stream {
			continue
		}
		cur += r.text
		if r.tag == "F" {
			out = append(out, cur)
			cur = ""
		}
	}
	if cur != "" {
		out = append(out, cur+"<partial>")
	}
	return out
}

func TestRunExitAndLog(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	ping, err := p.c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ping.Pid != p.proc.Pid || ping.MinVersion != MinVersion || ping.MaxVersion != Version {
		t.Fatalf("ping: %+v, want pid %d and versions %d-%d", ping, p.proc.Pid, MinVersion, Version)
	}
	before := time.Now()
	pid, dir, logPath := p.run("c1", "echo hi; printf 'part'; echo err >&2; exit 3")
	st, err := p.c.Wait(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Pid != pid || st.State != StateExited || st.Exit == nil || st.Exit.Code != 3 || st.Exit.Signal != 0 || st.Exit.OOMKilled {
		t.Fatalf("wait: %+v %+v", st, st.Exit)
	}
	if st.Exit.FinishedAt.Before(before.Add(-time.Second)) || time.Since(st.Exit.FinishedAt) > time.Minute {
		t.Fatalf("finished at %v, started at %v", st.Exit.FinishedAt, before)
	}
	// The exit is on disk, in the format berth reads today.
	rec, err := monitor.ReadExit(dir)
	if err != nil || rec == nil {
		t.Fatalf("exit file: %v %v", rec, err)
	}
	if rec.Code != 3 || !rec.FinishedAt.Equal(st.Exit.FinishedAt.Truncate(0)) {
		t.Fatalf("exit file %+v, wait said %+v", rec, st.Exit)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, ".exit-*")); len(matches) > 0 {
		t.Fatalf("temporary exit files left: %v", matches)
	}
	// The output was drained before the exit was recorded.
	recs := readLog(t, logPath)
	if got := lines(recs, "stdout"); strings.Join(got, "|") != "hi|part<partial>" {
		t.Fatalf("stdout lines %q (records %q)", got, recs)
	}
	if got := lines(recs, "stderr"); strings.Join(got, "|") != "err" {
		t.Fatalf("stderr lines %q", got)
	}
	st2, err := p.c.Status(ctx, "c1")
	if err != nil || st2.State != StateExited || st2.Exit.Code != 3 || !st2.Exit.FinishedAt.Equal(st.Exit.FinishedAt) {
		t.Fatalf("status: %+v %v", st2, err)
	}
	if err := p.c.Signal(ctx, "c1", syscall.SIGTERM); !IsCode(err, CodeNotRunning) {
		t.Fatalf("signal of an exited process: %v", err)
	}
	if _, err := p.c.Run(ctx, &RunRequest{ID: "c1", Dir: dir, Args: []string{"/bin/true"}}); !IsCode(err, CodeExists) {
		t.Fatalf("run with an id in use: %v", err)
	}
	if err := p.c.Delete(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.c.Status(ctx, "c1"); !IsCode(err, CodeNotFound) {
		t.Fatalf("status after delete: %v", err)
	}
	if err := p.c.Delete(ctx, "c1"); !IsCode(err, CodeNotFound) {
		t.Fatalf("delete after delete: %v", err)
	}
	shutdown(t, p)
}

// shutdown ends the pod process and checks it left nothing.
func shutdown(t *testing.T, p *pod) {
	t.Helper()
	if err := p.c.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	st, err := p.proc.Wait()
	if err != nil || !st.Success() {
		t.Fatalf("pod process: %v %v", st, err)
	}
	if _, err := os.Stat(p.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	if _, err := p.c.Ping(ctxT(t)); !errors.Is(err, monitor.ErrUnreachable) {
		t.Fatalf("ping after shutdown: %v", err)
	}
}

func TestSignalWaitAndBusy(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	pid, dir, _ := p.run("sleeper", "exec sleep 100")
	st, err := p.c.Status(ctx, "sleeper")
	if err != nil || st.State != StateRunning || st.Pid != pid || st.Exit != nil {
		t.Fatalf("status: %+v %v", st, err)
	}
	if err := p.c.Shutdown(ctx); !IsCode(err, CodeBusy) {
		t.Fatalf("shutdown while a process runs: %v", err)
	}
	if err := p.c.Delete(ctx, "sleeper"); !IsCode(err, CodeBusy) {
		t.Fatalf("delete while it runs: %v", err)
	}
	// Several waiters, one of them hanging up early.
	waits := make(chan *Status, 2)
	for range 2 {
		go func() {
			st, err := p.c.Wait(ctx, "sleeper")
			if err != nil {
				t.Error(err)
			}
			waits <- st
		}()
	}
	early, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if _, err := p.c.Wait(early, "sleeper"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait cut short: %v", err)
	}
	cancel()
	if err := p.c.Signal(ctx, "sleeper", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		st := <-waits
		if st == nil || st.Exit.Signal != int(syscall.SIGKILL) || st.Exit.Code != 128+9 {
			t.Fatalf("wait: %+v", st)
		}
	}
	if rec, err := monitor.ReadExit(dir); err != nil || rec.Signal != 9 || rec.Code != 137 {
		t.Fatalf("exit file: %+v %v", rec, err)
	}
	shutdown(t, p)
}

// An exit is recorded even while a process the container left behind
// holds its output open: after the drain timeout, not when it lets go.
func TestExitRecordedDespiteHeldOutput(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	pid, _, logPath := p.run("leaver", "sleep 30 & echo left; exit 7")
	start := time.Now()
	st, err := p.c.Wait(ctx, "leaver")
	if err != nil || st.Exit.Code != 7 {
		t.Fatalf("wait: %+v %v", st, err)
	}
	if d := time.Since(start); d < time.Second || d > 10*time.Second {
		t.Fatalf("exit recorded after %v, want about the 2s drain timeout", d)
	}
	if got := lines(readLog(t, logPath), "stdout"); len(got) != 1 || got[0] != "left" {
		t.Fatalf("stdout %q", got)
	}
	// The sleeper, an orphan now the pod process's, is killed and reaped
	// by it (a child subreaper): nothing of the group is left.
	syscall.Kill(-pid, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(-pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still there: orphans not reaped", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	shutdown(t, p)
}

func TestReopenLog(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	p.run("rot", "trap 'echo two; exit 0' USR1; echo one; while :; do sleep 0.02; done")
	logPath := filepath.Join(p.dir, "rot.log")
	waitFor(t, func() bool { d, _ := os.ReadFile(logPath); return bytes.Contains(d, []byte("one")) })
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := p.c.ReopenLog(ctx, "rot"); err != nil {
		t.Fatal(err)
	}
	if err := p.c.Signal(ctx, "rot", syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if st, err := p.c.Wait(ctx, "rot"); err != nil || st.Exit.Code != 0 {
		t.Fatalf("wait: %+v %v", st, err)
	}
	if got := lines(readLog(t, logPath+".1"), "stdout"); strings.Join(got, "|") != "one" {
		t.Fatalf("rotated log %q", got)
	}
	if got := lines(readLog(t, logPath), "stdout"); strings.Join(got, "|") != "two" {
		t.Fatalf("new log %q", got)
	}
	// A log whose directory is gone cannot be reopened: said, not fatal.
	os.Remove(logPath)
	p.run("gone", "exec sleep 100")
	os.RemoveAll(filepath.Join(p.dir, "gone.log"))
	if err := os.Rename(p.dir, p.dir+"-moved"); err == nil {
		defer os.Rename(p.dir+"-moved", p.dir)
		c := &Client{Socket: filepath.Join(p.dir+"-moved", "pp.sock")}
		if err := c.ReopenLog(ctx, "gone"); !IsCode(err, CodeFailed) {
			t.Fatalf("reopen into a missing dir: %v", err)
		}
		if err := c.Signal(ctx, "gone", syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunFailures(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	dir := t.TempDir()
	// Missing paths under the test's own directory: a host's /nonexistent
	// may well exist.
	missing := filepath.Join(dir, "missing")
	_, err := p.c.Run(ctx, &RunRequest{ID: "x", Dir: dir, Args: []string{filepath.Join(missing, "prog")}})
	if !IsCode(err, CodeFailed) || !strings.Contains(err.Error(), "No such file") {
		t.Fatalf("run of a missing program: %v", err)
	}
	if _, err := p.c.Status(ctx, "x"); !IsCode(err, CodeNotFound) {
		t.Fatalf("a failed run left a record: %v", err)
	}
	if _, err := p.c.Run(ctx, &RunRequest{ID: "x", Dir: dir, Args: []string{"sh"}}); !IsCode(err, CodeInvalid) {
		t.Fatalf("run of a relative path: %v", err)
	}
	_, err = p.c.Run(ctx, &RunRequest{ID: "x", Dir: dir, LogPath: filepath.Join(missing, "x.log"), Args: []string{"/bin/true"}})
	if !IsCode(err, CodeFailed) {
		t.Fatalf("run with a log in a missing dir: %v", err)
	}
	if _, err := p.c.Run(ctx, &RunRequest{ID: "a/b", Dir: dir, Args: []string{"/bin/true"}}); !IsCode(err, CodeInvalid) {
		t.Fatalf("run with a slash in the id: %v", err)
	}
	// A systemd scope is joined through the helper with the systemd
	// driver only: refused, before anything runs, by a pod process
	// without either.
	_, err = p.c.Run(ctx, &RunRequest{ID: "s", Dir: dir, Args: []string{"/bin/true"}, Scope: "test.slice:berth:s"})
	if !IsCode(err, CodeUnsupported) {
		t.Fatalf("run into a scope without the systemd driver: %v", err)
	}
	// Operations of later slices are refused as such, their frames valid.
	if _, err := p.c.Create(ctx, &CreateRequest{ID: "c", Dir: dir, Stdin: true}); !IsCode(err, CodeUnsupported) {
		t.Fatalf("create: %v", err)
	}
	if err := p.c.Update(ctx, "c", []byte(`{"cpu":{}}`)); !IsCode(err, CodeNotFound) {
		t.Fatalf("update of an unknown id: %v", err)
	}
	if err := p.c.Start(ctx, "c"); !IsCode(err, CodeNotFound) {
		t.Fatalf("start of an unknown id: %v", err)
	}
	// A failed run leaves no process and no descriptor behind: stdio,
	// the signalfd, the epoll and the socket are all there is.
	// (The last call's connection may be closing still.)
	deadline := time.Now().Add(time.Second)
	for countFDs(t, p.proc.Pid) != 6 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := countFDs(t, p.proc.Pid); n != 6 {
		out, _ := exec.Command("ls", "-l", fmt.Sprintf("/proc/%d/fd", p.proc.Pid)).CombinedOutput()
		t.Fatalf("pod process holds %d descriptors after failed runs:\n%s", n, out)
	}
	shutdown(t, p)
}

// A process the pod process runs holds its stdio and nothing else of
// the pod process's, whatever the pod process inherited.
func TestChildSeesOnlyItsStdio(t *testing.T) {
	p := startPod(t)
	_, _, logPath := p.run("fds", "ls /proc/$$/fd")
	if _, err := p.c.Wait(ctxT(t), "fds"); err != nil {
		t.Fatal(err)
	}
	if got := lines(readLog(t, logPath), "stdout"); strings.Join(got, " ") != "0 1 2" {
		t.Fatalf("the process's descriptors: %q", got)
	}
	shutdown(t, p)
}

func countFDs(t *testing.T, pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// rawCall sends bytes and returns what comes back before the pod process
// hangs up.
func rawCall(t *testing.T, sock string, data []byte) []byte {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(data); err != nil {
		t.Fatal(err)
	}
	conn.(*net.UnixConn).CloseWrite()
	var out bytes.Buffer
	out.ReadFrom(conn)
	return out.Bytes()
}

func TestProtocolErrors(t *testing.T) {
	p := startPod(t)
	ctx := ctxT(t)
	// A berth of protocol version 1 (JSON lines) is told, in its own
	// terms, that this process speaks another version.
	old := &monitor.Client{Socket: p.sock}
	if _, err := old.Call(ctx, &monitor.Request{Op: monitor.OpPing}); !errors.Is(err, monitor.ErrVersion) {
		t.Fatalf("a version 1 call: %v", err)
	}
	// A frame of a later version is refused, in this side's version.
	f := newFrame(TypePing)
	b, _ := f.bytes()
	b[1] = Version + 1
	m, err := decode(rawCall(t, p.sock, b))
	if err != nil || m.Code != CodeVersion || m.Version != Version || m.Type != TypePing|TypeResponse {
		t.Fatalf("a later version: %+v %v", m, err)
	}
	// Frames against the schema are answered as invalid.
	for name, b := range map[string][]byte{
		"unknown type":   {Magic, Version, 99, 0, 0, 0, 0, 0},
		"response":       {Magic, Version, byte(TypePing | TypeResponse), 0, 0, 0, 0, 0},
		"missing id":     {Magic, Version, byte(TypeStatus), 0, 0, 0, 0, 0},
		"truncated":      {Magic, Version, byte(TypeStatus), 0, 2, 0, 0, 0, 1, 2},
		"foreign field":  {Magic, Version, byte(TypePing), 0, 4, 0, 0, 0, tagID, 1, 0, 0},
		"unterminated":   {Magic, Version, byte(TypeStatus), 0, 4, 0, 0, 0, tagID, 1, 0, 'a'},
		"frame as input": {Magic, Version, byte(FrameStdin), 0, 1, 0, 0, 0, 'x'},
	} {
		m, err := decode(rawCall(t, p.sock, b))
		if err != nil || m.Code != CodeInvalid || m.Msg == "" {
			t.Errorf("%s: %+v %v", name, m, err)
		}
	}
	// Not frames at all: the connection is dropped, unanswered.
	for name, b := range map[string][]byte{
		"bad magic":    {0, Version, 1, 0, 0, 0, 0, 0},
		"reserved":     {Magic, Version, 1, 1, 0, 0, 0, 0},
		"too long":     {Magic, Version, 1, 0, 0, 0, 2, 0},
		"half header":  {Magic, Version, 1},
		"half payload": {Magic, Version, byte(TypeStatus), 0, 10, 0, 0, 0, 1},
	} {
		if out := rawCall(t, p.sock, b); len(out) != 0 {
			t.Errorf("%s: answered %q", name, out)
		}
	}
	// Many connections at once, some idle: the process still answers.
	var conns []net.Conn
	for range 200 {
		c, err := net.Dial("unix", p.sock)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, func() bool { _, err := p.c.Ping(ctx); return err == nil })
	shutdown(t, p)
}

// The Go and C schemas agree: every frame the Go side builds, the C side
// takes, which the tests above show by calls, and the Go decoder refuses
// what the C parser refuses.
func TestDecode(t *testing.T) {
	f := newFrame(TypeRun)
	f.str(tagID, "a")
	f.str(tagDir, "/d")
	f.str(tagArg, "/bin/sh")
	f.str(tagArg, "")
	f.u32(tagFlags, uint32(FlagStdin|FlagNewPID))
	b, err := f.bytes()
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(b)
	if err != nil || m.ID != "a" || m.Dir != "/d" || len(m.Args) != 2 || m.Args[1] != "" || m.Flags != FlagStdin|FlagNewPID {
		t.Fatalf("%+v %v", m, err)
	}
	for name, b := range map[string][]byte{
		"short":      b[:len(b)-1],
		"long":       append(append([]byte(nil), b...), 0),
		"bad flags":  {Magic, Version, byte(TypeAttach), 0, 11, 0, 0, 0, tagID, 2, 0, 'a', 0, tagFlags, 4, 0, 0, 1, 0, 0},
		"signal 0":   {Magic, Version, byte(TypeSignal), 0, 12, 0, 0, 0, tagID, 2, 0, 'a', 0, tagSignal, 4, 0, 0, 0, 0, 0},
		"repeated":   {Magic, Version, byte(TypeStatus), 0, 10, 0, 0, 0, tagID, 2, 0, 'a', 0, tagID, 2, 0, 'b', 0},
		"space id":   {Magic, Version, byte(TypeStatus), 0, 6, 0, 0, 0, tagID, 3, 0, 'a', ' ', 0},
		"nul inside": {Magic, Version, byte(TypeStatus), 0, 6, 0, 0, 0, tagID, 3, 0, 'a', 0, 0},
	} {
		if _, err := decode(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	g := newFrame(TypeRun)
	g.str(tagArg, "a\x00b")
	if _, err := g.bytes(); err == nil {
		t.Error("a NUL in a string was encoded")
	}
	g = newFrame(TypeRun)
	g.str(tagDir, strings.Repeat("x", MaxString))
	if _, err := g.bytes(); err == nil {
		t.Error("an over-long string was encoded")
	}
}

func FuzzDecode(f *testing.F) {
	fr := newFrame(TypeRun)
	fr.str(tagID, "a")
	fr.str(tagDir, "/d")
	fr.str(tagArg, "/bin/sh")
	b, _ := fr.bytes()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		decode(b)
	})
}

// TestIdleMemory measures idle pod processes, each holding one process
// that logged a line and sleeps: their proportional set size from
// smaps_rollup, shared file pages (the binary's text) split among them as
// the kernel does, and the private part alone.
func TestIdleMemory(t *testing.T) {
	const n = 10
	var pods []*pod
	for i := range n {
		p := startPod(t)
		p.run(fmt.Sprint("c", i), "echo hello; exec sleep 100")
		pods = append(pods, p)
	}
	var pss, anon int
	for i, p := range pods {
		waitFor(t, func() bool { d, _ := os.ReadFile(filepath.Join(p.dir, fmt.Sprint("c", i, ".log"))); return len(d) > 0 })
	}
	for _, p := range pods {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", p.proc.Pid))
		if err != nil {
			t.Skip("no smaps_rollup:", err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.Atoi(f[1])
			switch f[0] {
			case "Pss:":
				pss += v
			case "Pss_Anon:":
				anon += v
			}
		}
	}
	t.Logf("%d idle pod processes, each with one logged process: Pss %d kB each, of which anonymous %d kB", n, pss/n, anon/n)
	if anon/n > 200 {
		t.Fatalf("anonymous Pss %d kB per pod process: want at most 200 kB", anon/n)
	}
	for i, p := range pods {
		id := fmt.Sprint("c", i)
		if err := p.c.Signal(ctxT(t), id, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if _, err := p.c.Wait(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		shutdown(t, p)
	}
}
