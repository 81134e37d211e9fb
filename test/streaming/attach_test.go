package streaming_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestAttachStdin: crictl attach -i to a container started with stdin
// and stdin_once: input reaches it, its output comes back (and goes to
// its log as well), and the end of input ends the container.
func TestAttachStdin(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("attach")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ctr := e.Run(pod, podCfg, "reader-"+tr, `while read l; do echo "got:$l"; done; echo bye`, func(c *runtimeapi.ContainerConfig) {
				c.Stdin, c.StdinOnce = true, true
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := e.crictlCmd(ctx, "attach", "-i", "--transport", tr, ctr)
			// An OS pipe, not io.Pipe: a write must fail, not block, once
			// crictl is gone.
			w, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Attached output is what the container writes from now on:
			// keep sending until an answer shows the session is up.
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(containerLog(t, e, ctr), "got:ping") {
				if time.Now().After(deadline) {
					t.Fatal("the container never got input")
				}
				io.WriteString(w, "ping\n")
				time.Sleep(100 * time.Millisecond)
			}
			io.WriteString(w, "last\n")
			w.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("crictl attach: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "got:last\nbye\n") {
				t.Fatalf("crictl attach printed:\n%s", out.String())
			}
			if st := e.WaitExit(ctr, 10*time.Second); st.ExitCode != 0 {
				t.Fatalf("exit code %d", st.ExitCode)
			}
		})
	}
}

// TestAttachTTY: crictl attach -it to a container with a terminal; its
// shell sees the client's size changes.
func TestAttachTTY(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("attach-tty")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ctr := e.Run(pod, podCfg, "shell-"+tr, "", func(c *runtimeapi.ContainerConfig) {
				c.Command = []string{"sh"}
				c.Stdin, c.Tty = true, true
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tm := startOnTerminal(t, e.crictlCmd(ctx, "attach", "-it", "--transport", tr, ctr), 100, 30)
			tm.askSize(0, 100, 30, "size")
			pos := len(tm.output())
			tm.resize(90, 20)
			tm.askSize(pos, 90, 20, "resize")
			tm.send("exit 0\n")
			if err := tm.wait(); err != nil {
				t.Fatalf("crictl attach: %v\n%q", err, tm.output())
			}
			e.WaitExit(ctr, 10*time.Second)
		})
	}
}

func containerLog(t *testing.T, e *env, id string) string {
	t.Helper()
	st, err := e.D.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := readFile(st.Status.LogPath)
	return b
}
