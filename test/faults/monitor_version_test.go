package faults_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/podproc"
	"github.com/berth-runtime/berth/test/framework"
)

// TestMonitorOfNewerProtocol: a pod's monitor answers in a protocol
// version this berth does not serve (as the monitor of a newer berth,
// then downgraded, would). The monitor's socket is moved aside while
// berth is down and a stand-in answering version 99 to every call takes
// its place; the real monitor keeps running what it runs. The restarted
// berth must serve at once (no hang on the pod), keep the pod and its
// container listed as recorded, log why at error, fail the calls that
// need the monitor with FailedPrecondition naming the versions, leave
// pause and the container running, and serve the other pod as before.
// With the real monitor back, the pod is served again and goes cleanly.
func TestMonitorOfNewerProtocol(t *testing.T) {
	e := framework.NewPodEnv(t, "berth-monver")
	c := &crasher{t: t, e: e}
	before := framework.SnapshotHost(t, crashScope(e))
	other := c.newBystander()
	future := c.newBystander()
	pause := pausePid(e, future.pod)
	sock := monitor.PathsFor(e.D.State, future.pod).Socket

	e.D.Kill()
	aside := sock + ".aside"
	if err := os.Rename(sock, aside); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan string, 64)
	// A pod with the C pod process (pod_process = "podproc") speaks
	// frames: its stand-in answers a frame of version 99.
	kind, _ := os.ReadFile(filepath.Join(monitor.PathsFor(e.D.State, future.pod).Dir, "kind"))
	frames := strings.TrimSpace(string(kind)) == "podproc"
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			if frames {
				var h [podproc.HeaderSize]byte
				io.ReadFull(conn, h[:])
				io.CopyN(io.Discard, conn, int64(binary.LittleEndian.Uint32(h[4:])))
				select {
				case calls <- fmt.Sprintf(`frame "version":%d`, h[1]):
				default:
				}
				conn.Write([]byte{podproc.Magic, 99, h[2] | byte(podproc.TypeResponse), 0, 0, 0, 0, 0})
				conn.Close()
				continue
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			select {
			case calls <- line:
			default:
			}
			conn.Write([]byte(`{"version":99,"pid":1,"state":"exited","exit":{"code":0}}` + "\n"))
			conn.Close()
		}
	}()
	restore := func() {
		l.Close()
		os.Remove(sock)
		if err := os.Rename(aside, sock); err != nil {
			t.Fatal(err)
		}
	}
	logged := logSize(e.D.LogPath)
	e.D.Restart()

	if st := c.podState(future.pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod of the monitor of version 99 is %s, want kept ready as recorded", st)
	}
	if st := c.ctrState(future.ctr); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("its container is %s, want kept running as recorded (the stand-in's exit must not be believed)", st)
	}
	if pid := c.ctrPid(other.ctr); pid != other.pid {
		t.Errorf("the other pod's container has pid %q after the restart, %q before", pid, other.pid)
	}
	ctx := framework.Ctx(t)
	start := time.Now()
	_, err = e.D.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: future.ctr, Timeout: 1})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "protocol version 99") {
		t.Errorf("StopContainer of a container whose monitor speaks version 99: %v, want FailedPrecondition naming the version", err)
	}
	_, err = e.D.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: future.ctr, Cmd: []string{"true"}, Timeout: 5})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "protocol version 99") {
		t.Errorf("ExecSync: %v, want FailedPrecondition naming the version", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refused calls took %s", d)
	}
	for len(calls) > 0 {
		want := `"version":1`
		if frames {
			want = fmt.Sprintf(`frame "version":%d`, podproc.Version)
		}
		if line := <-calls; !strings.Contains(line, want) {
			t.Errorf("berth called without its version: %s", line)
		}
	}
	log, err := os.ReadFile(e.D.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for line := range strings.Lines(string(log[logged:])) {
		if strings.Contains(line, "speaks a protocol this berth cannot serve") && strings.Contains(line, "protocol version 99") {
			found = true
			if !strings.Contains(line, "level=ERROR") {
				t.Errorf("logged, but not at error: %s", line)
			}
		}
	}
	if !found {
		t.Errorf("no log line says the monitor's version cannot be served:\n%s", log[logged:])
	}
	if err := syscall.Kill(pause, 0); err != nil {
		t.Errorf("pause (%d) of the pod: %v; it must be left running", pause, err)
	}
	if _, err := os.Stat("/proc/" + future.pid); err != nil {
		t.Errorf("the container (pid %s): %v; it must be left running", future.pid, err)
	}

	// The real monitor back: served again, and removed cleanly.
	e.D.Kill()
	restore()
	e.D.Restart()
	if st := c.podState(future.pod); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod %s is %s with its monitor back", future.pod, st)
	}
	if pid := c.ctrPid(future.ctr); pid != future.pid {
		t.Errorf("its container has pid %q, %q before", pid, future.pid)
	}
	c.removeAll()
	framework.CheckHost(t, before)
}
