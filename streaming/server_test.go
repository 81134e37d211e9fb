package streaming

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/berth-runtime/berth/container"
)

type fakeContainers struct{}

// Exec echoes stdin to stdout in upper case and exits with the number of
// lines read.
func (fakeContainers) Exec(ctx context.Context, id string, cmd []string, st container.Streams) (int, error) {
	if id != "c1" {
		return 0, errors.New("no such container")
	}
	sc := bufio.NewScanner(st.Stdin)
	n := 0
	for sc.Scan() {
		n++
		io.WriteString(st.Stdout, strings.ToUpper(sc.Text())+"\n")
	}
	return n, nil
}

func (fakeContainers) Attach(ctx context.Context, id string, st container.Streams) error {
	return errors.New("not in this test")
}

// fakePods puts every pod on the host's network.
type fakePods struct{}

func (fakePods) NetNS(ctx context.Context, id string) (string, error) { return "", nil }

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newServer(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Containers, opts.Pods = fakeContainers{}, fakePods{}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	return s
}

func TestTokens(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	tk := newTokens(time.Minute, 2, c.Now)
	a, err := tk.issue("a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tk.issue("b")
	if a == b || len(a) < 20 {
		t.Fatalf("tokens %q %q", a, b)
	}
	if _, err := tk.issue("c"); !errors.Is(err, errTooManyRequests) {
		t.Fatalf("third token with a limit of 2: %v", err)
	}
	if req, ok := tk.use(a); !ok || req != "a" {
		t.Fatalf("use a: %v %v", req, ok)
	}
	if _, ok := tk.use(a); ok {
		t.Fatal("a token worked twice")
	}
	c.add(time.Minute)
	if _, ok := tk.use(b); ok {
		t.Fatal("an expired token worked")
	}
	c.add(-time.Minute)
	tk.issue("d")
	c.add(2 * time.Minute)
	if _, err := tk.issue("e"); err != nil {
		t.Fatalf("expired tokens still count against the limit: %v", err)
	}
	if _, ok := tk.use("nonsense"); ok {
		t.Fatal("an unknown token worked")
	}
}

func TestValidation(t *testing.T) {
	s := newServer(t, Options{})
	tests := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"exec without container", func() error {
			_, err := s.GetExec(&runtimeapi.ExecRequest{Cmd: []string{"sh"}, Stdout: true})
			return err
		}, codes.InvalidArgument},
		{"exec without cmd", func() error {
			_, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Stdout: true})
			return err
		}, codes.InvalidArgument},
		{"exec tty and stderr", func() error {
			_, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh"}, Tty: true, Stderr: true})
			return err
		}, codes.InvalidArgument},
		{"exec no stream", func() error {
			_, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh"}})
			return err
		}, codes.InvalidArgument},
		{"attach no stream", func() error { _, err := s.GetAttach(&runtimeapi.AttachRequest{ContainerId: "c1"}); return err }, codes.InvalidArgument},
		{"port-forward without pod", func() error { _, err := s.GetPortForward(&runtimeapi.PortForwardRequest{}); return err }, codes.InvalidArgument},
		{"port-forward bad port", func() error {
			_, err := s.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "p", Port: []int32{70000}})
			return err
		}, codes.InvalidArgument},
		{"exec ok", func() error {
			_, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh"}, Stdin: true})
			return err
		}, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(tt.call()); got != tt.code {
				t.Fatalf("code %s, want %s", got, tt.code)
			}
		})
	}
}

// TestUsedAndExpiredURLs: a URL works once, and not after its TTL.
func TestUsedAndExpiredURLs(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newServer(t, Options{TokenTTL: time.Minute, now: c.Now})
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"cat"}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Url, "http://127.0.0.1:") {
		t.Fatalf("url %s", resp.Url)
	}
	ws := dialV5(t, resp.Url)
	ws.Close()
	if code := get(t, resp.Url); code != http.StatusNotFound {
		t.Fatalf("second use: %d, want 404", code)
	}
	resp, _ = s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"cat"}, Stdin: true, Stdout: true})
	c.add(time.Minute)
	if code := get(t, resp.Url); code != http.StatusNotFound {
		t.Fatalf("expired: %d, want 404", code)
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode
}

func dialV5(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	cfg, err := websocket.NewConfig(strings.Replace(url, "http://", "ws://", 1), "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Protocol = []string{protocolV5}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws.PayloadType = websocket.BinaryFrame
	return ws
}

// TestWebSocketV5: stdin, its close signal, stdout and the exit code on
// the error channel, as client-go's v5 executor uses them.
func TestWebSocketV5(t *testing.T) {
	s := newServer(t, Options{})
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"upper"}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	ws := dialV5(t, resp.Url)
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(10 * time.Second))
	websocket.Message.Send(ws, append([]byte{0}, "hello\nworld\n"...))
	websocket.Message.Send(ws, []byte{255, 0}) // close stdin
	var stdout strings.Builder
	var st apiStatus
	for {
		var msg []byte
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			t.Fatalf("receive: %v (stdout %q)", err, stdout.String())
		}
		if len(msg) == 0 {
			continue
		}
		if msg[0] == 1 {
			stdout.Write(msg[1:])
		}
		if msg[0] == 3 {
			if err := json.Unmarshal(msg[1:], &st); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if stdout.String() != "HELLO\nWORLD\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
	if st.Status != "Failure" || st.Reason != "NonZeroExitCode" || st.Details == nil || st.Details.Causes[0].Message != "2" || st.Details.Causes[0].Type != "ExitCode" {
		t.Fatalf("status %+v", st)
	}
}

// TestPortForwardTunnel: SPDY inside a WebSocket, to a server on the
// (host's) loopback, as client-go's tunnelling dialer does it.
func TestPortForwardTunnel(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				data, _ := io.ReadAll(c) // until the client's half-close
				io.WriteString(c, "pong:"+string(data))
			}()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	s := newServer(t, Options{})
	resp, err := s.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "p1", Port: []int32{int32(port)}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := websocket.NewConfig(strings.Replace(resp.Url, "http://", "ws://", 1), "http://localhost/")
	cfg.Protocol = []string{tunnelProtocol}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws.PayloadType = websocket.BinaryFrame
	conn, err := spdy.NewClientConnection(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 2 {
		h := http.Header{}
		h.Set("port", strconv.Itoa(port))
		h.Set("requestID", strconv.Itoa(i))
		h.Set("streamType", "error")
		errStream, err := conn.CreateStream(h)
		if err != nil {
			t.Fatal(err)
		}
		errStream.Close()
		h.Set("streamType", "data")
		data, err := conn.CreateStream(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(data, "ping")
		data.Close() // half-close: the server answers after EOF
		got := readAll(t, data)
		if got != "pong:ping" {
			t.Fatalf("connection %d: got %q", i, got)
		}
		if msg := readAll(t, errStream); msg != "" {
			t.Fatalf("error stream: %q", msg)
		}
		conn.RemoveStreams(data, errStream)
	}
}

func readAll(t *testing.T, s httpstream.Stream) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(s)
		done <- string(b)
	}()
	select {
	case got := <-done:
		return got
	case <-time.After(10 * time.Second):
		t.Fatal("stream not closed within 10s")
		return ""
	}
}
