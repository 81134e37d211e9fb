package container_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

func TestPodSharesNetworkAndHostname(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("shared")
	pod := e.runPod(podCfg)
	server := e.run(pod, podCfg, e.ctrConfig("server", "while true; do echo pong | nc -l -p 8080; done"))
	client := e.run(pod, podCfg, e.ctrConfig("client", "sleep 1000"))
	var got string
	for i := 0; i < 50; i++ {
		got = string(e.exec(client, 5, "sh", "-c", "echo ping | nc -w 1 127.0.0.1 8080").Stdout)
		if strings.Contains(got, "pong") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(got, "pong") {
		t.Fatalf("client did not reach the server on localhost: %q", got)
	}
	addr := func(id string) string {
		return string(e.exec(id, 5, "sh", "-c", "hostname; ip -4 -o addr show eth0 | awk '{print $4}'").Stdout)
	}
	a, b := addr(server), addr(client)
	if a != b || !strings.HasPrefix(a, "shared\n") || !strings.Contains(a, "/") {
		t.Fatalf("server sees %q, client sees %q", a, b)
	}
}

func TestExecSync(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("exec")
	pod := e.runPod(podCfg)
	id := e.run(pod, podCfg, e.ctrConfig("app", "sleep 1000"))
	r := e.exec(id, 0, "sh", "-c", "echo out; echo err >&2; exit 3")
	if string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || r.ExitCode != 3 {
		t.Fatalf("exec: %q %q %d", r.Stdout, r.Stderr, r.ExitCode)
	}
	start := time.Now()
	_, err := e.d.Runtime.ExecSync(framework.Ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "30"}, Timeout: 1})
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 10*time.Second {
		t.Fatalf("timeout: %v after %s", err, time.Since(start))
	}
	if ps := string(e.exec(id, 5, "ps").Stdout); strings.Contains(ps, "sleep 30") {
		t.Fatalf("timed-out command still runs:\n%s", ps)
	}
}

func TestStop(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("stop")
	pod := e.runPod(podCfg)
	ctx := framework.Ctx(t)

	// A trapped stop signal with a grace period: the container exits by itself.
	cfg := e.ctrConfig("graceful", "trap 'echo got-term; exit 4' TERM; while true; do sleep 0.1; done")
	id := e.run(pod, podCfg, cfg)
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if _, err := e.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	st := e.status(id)
	if st.ExitCode != 4 || time.Since(start) > 5*time.Second || !strings.Contains(logText(t, st.LogPath), "got-term") {
		t.Fatalf("graceful stop: code %d after %s", st.ExitCode, time.Since(start))
	}

	// The configured stop signal is used.
	cfg = e.ctrConfig("usr1", "trap 'exit 5' USR1; while true; do sleep 0.1; done")
	cfg.StopSignal = runtimeapi.Signal_SIGNAL_SIGUSR1
	id = e.run(pod, podCfg, cfg)
	time.Sleep(200 * time.Millisecond)
	if _, err := e.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	if st := e.status(id); st.ExitCode != 5 {
		t.Fatalf("stop signal: code %d", st.ExitCode)
	}

	// An ignored signal: SIGKILL after the grace period.
	id = e.run(pod, podCfg, e.ctrConfig("stubborn", "trap '' TERM; while true; do sleep 0.1; done"))
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	if _, err := e.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second || e.status(id).ExitCode != 137 {
		t.Fatalf("grace then kill: %s, code %d", d, e.status(id).ExitCode)
	}

	// Timeout 0 kills at once; a second stop succeeds.
	id = e.run(pod, podCfg, e.ctrConfig("now", "trap '' TERM; sleep 1000"))
	start = time.Now()
	for i := 0; i < 2; i++ {
		if _, err := e.d.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 2*time.Second || e.status(id).ExitCode != 137 {
		t.Fatalf("timeout 0: %s, code %d", d, e.status(id).ExitCode)
	}
}

func TestReopenLog(t *testing.T) {
	e := newEnv(t)
	podCfg := e.podConfig("reopen")
	pod := e.runPod(podCfg)
	id := e.run(pod, podCfg, e.ctrConfig("counter", "i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); sleep 0.005; done"))
	st := e.status(id)
	time.Sleep(500 * time.Millisecond)
	if err := renameAndReopen(e, id, st.LogPath); err != nil {
		t.Fatal(err)
	}
	e.waitExit(id, 30*time.Second)
	all := logText(t, st.LogPath+".1") + "\n" + logText(t, st.LogPath)
	checkSequence(t, all, 400)
}

func renameAndReopen(e *env, id, path string) error {
	if err := rename(path, path+".1"); err != nil {
		return err
	}
	_, err := e.d.Runtime.ReopenContainerLog(framework.Ctx(e.t), &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
	return err
}
