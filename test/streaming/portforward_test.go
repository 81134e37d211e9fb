package streaming_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

// TestPortForward: crictl port-forward to an HTTP server listening inside
// a pod, over SPDY and over WebSocket, several connections per session.
func TestPortForward(t *testing.T) {
	e := newEnv(t)
	pod, podCfg := e.RunPod("pf")
	web := e.Run(pod, podCfg, "web", "mkdir -p /tmp/www && echo hello-from-pod > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www", nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.D.Runtime.ExecSync(framework.Ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: web, Cmd: []string{"wget", "-q", "-O-", "http://127.0.0.1:8080/"}, Timeout: 5})
		if err == nil && r.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("httpd in the pod is not serving: %v %v", err, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			local := framework.FreeTCPAddr(t)
			_, port, _ := net.SplitHostPort(local)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := e.crictlCmd(ctx, "port-forward", "--transport", tr, pod, port+":8080")
			stdout, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Kill()
				cmd.Wait()
			}()
			ready := make(chan struct{})
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if strings.Contains(sc.Text(), "Forwarding from") {
						close(ready)
						io.Copy(io.Discard, stdout)
						return
					}
				}
			}()
			select {
			case <-ready:
			case <-time.After(20 * time.Second):
				t.Fatalf("crictl port-forward not ready: %s", stderr.String())
			}
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := range 3 {
				resp, err := client.Get(fmt.Sprintf("http://%s/index.html", local))
				if err != nil {
					t.Fatalf("request %d: %v\ncrictl: %s", i, err, stderr.String())
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "hello-from-pod\n" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
			}
		})
	}
}
