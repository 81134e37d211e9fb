package streaming_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestExecTTY: crictl exec -it on a terminal; the command sees the
// terminal's size, and a later resize.
func TestExecTTY(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("exec-tty")
	ctr := e.Run(pod, podCfg, "sleeper", "sleep 1000", nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tm := startOnTerminal(t, e.crictlCmd(ctx, "exec", "-it", "--transport", tr, ctr, "sh"), 80, 24)
			tm.send("stty size\n")
			pos := tm.expect(0, "24 80")
			tm.resize(132, 50)
			tm.askSize(pos, 132, 50, "resize")
			tm.send("echo in-$((6*7)); exit 3\n")
			tm.expect(pos, "in-42")
			err := tm.wait()
			if err == nil || !strings.Contains(tm.output(), "exit code 3") {
				t.Fatalf("crictl: %v\n%q", err, tm.output())
			}
		})
	}
}

// TestExecStdin: input piped to crictl exec -i reaches the command, whose
// end of input is the pipe's.
func TestExecStdin(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("exec-stdin")
	ctr := e.Run(pod, podCfg, "sleeper", "sleep 1000", nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			out, err := e.crictlRun("hello\nworld\n", "exec", "-i", "--transport", tr, ctr, "sh", "-c", "tr a-z A-Z; echo done >&2")
			if err != nil || !strings.Contains(out, "HELLO\nWORLD\n") || !strings.Contains(out, "done") {
				t.Fatalf("crictl exec -i: %v\n%s", err, out)
			}
			out, err = e.crictlRun("", "exec", "--transport", tr, ctr, "sh", "-c", "echo partial; exit 5")
			if err == nil || !strings.Contains(out, "partial") || !strings.Contains(out, "exit code 5") {
				t.Fatalf("crictl exec with exit 5: %v\n%s", err, out)
			}
		})
	}
}

// TestStreamingURLs: a URL works once; calls on a container that does not
// run are refused before any URL is handed out.
func TestStreamingURLs(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("urls")
	ctr := e.Run(pod, podCfg, "sleeper", "sleep 1000", nil)
	resp, err := e.D.Runtime.Exec(framework.Ctx(t), &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"true"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Url, "http://127.0.0.1:") {
		t.Fatalf("url %s: want the loopback default", resp.Url)
	}
	first := httpGet(t, resp.Url)
	if first == http.StatusNotFound {
		t.Fatalf("a fresh URL answered 404")
	}
	if again := httpGet(t, resp.Url); again != http.StatusNotFound {
		t.Fatalf("a used URL answered %d, want 404", again)
	}
	done := e.Run(pod, podCfg, "done", "true", nil)
	e.WaitExit(done, 20*time.Second)
	_, err = e.D.Runtime.Exec(framework.Ctx(t), &runtimeapi.ExecRequest{ContainerId: done, Cmd: []string{"true"}, Stdout: true})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("exec in an exited container: %v, want FailedPrecondition", err)
	}
	_, err = e.D.Runtime.Attach(framework.Ctx(t), &runtimeapi.AttachRequest{ContainerId: "nonexistent", Stdout: true})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("attach to a missing container: %v, want NotFound", err)
	}
	_, err = e.D.Runtime.Exec(framework.Ctx(t), &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"sh"}, Tty: true, Stderr: true, Stdout: true})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("exec with tty and stderr: %v, want InvalidArgument", err)
	}
}

func httpGet(t *testing.T, url string) int {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode
}
