package monitor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeMonitor answers every call on a socket with one fixed response line,
// and hands over each request it read.
func fakeMonitor(t *testing.T, answer string) (*Client, <-chan map[string]any) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "m.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	reqs := make(chan map[string]any, 16)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadBytes('\n')
			var req map[string]any
			json.Unmarshal(line, &req)
			reqs <- req
			conn.Write([]byte(answer + "\n"))
			conn.Close()
		}
	}()
	return &Client{Socket: sock}, reqs
}

func TestProtocolVersion(t *testing.T) {
	tests := []struct {
		name    string
		answer  string
		wantErr error  // nil: success
		want    string // in the error's text
	}{
		{name: "current", answer: `{"version":1,"pid":7}`},
		// Monitors before versions answered without one: version 1.
		{name: "unversioned monitor", answer: `{"pid":7}`},
		{name: "unversioned monitor's own error", answer: `{"error":"no such container","code":"not-found"}`, wantErr: &Error{}, want: "no such container"},
		{name: "newer monitor", answer: `{"version":99,"pid":7}`, wantErr: ErrVersion, want: "speaks protocol version 99; this berth serves versions 1 to 1"},
		// Whatever else it says: its error code may mean something else.
		{name: "newer monitor's error", answer: `{"version":99,"error":"x","code":"not-found"}`, wantErr: ErrVersion, want: "protocol version 99"},
		{name: "monitor refusing the call's version", answer: `{"version":3,"code":"version","error":"monitor of pod p speaks protocol versions 3 to 4, not the call's version 1"}`, wantErr: ErrVersion, want: "versions 3 to 4, not the call's version 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, reqs := fakeMonitor(t, tt.answer)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := c.Call(ctx, &Request{Op: OpPing})
			if req := <-reqs; req["version"] != float64(ProtocolVersion) || req["op"] != OpPing {
				t.Errorf("request sent: %v, want version %d", req, ProtocolVersion)
			}
			switch {
			case tt.wantErr == nil:
				if err != nil || resp.Pid != 7 {
					t.Fatalf("got %+v, %v", resp, err)
				}
				return
			case err == nil:
				t.Fatalf("no error, want %v", tt.wantErr)
			case ctx.Err() != nil:
				t.Fatalf("the call hung until its deadline: %v", err)
			}
			var me *Error
			if (errors.Is(tt.wantErr, ErrVersion) && !errors.Is(err, ErrVersion)) || (!errors.Is(tt.wantErr, ErrVersion) && (!errors.As(err, &me) || errors.Is(err, ErrVersion))) {
				t.Fatalf("error %v (%T), want %T", err, err, tt.wantErr)
			}
			if errors.Is(err, ErrUnreachable) {
				t.Errorf("a monitor that answers taken for gone: %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), c.Socket) && me == nil {
				t.Errorf("error %q does not say %q and name the socket", err, tt.want)
			}
		})
	}
}

func TestServed(t *testing.T) {
	for v, want := range map[int]bool{0: true, 1: true, 2: false, 99: false, -1: false} {
		if Served(v) != want {
			t.Errorf("Served(%d) = %v", v, !want)
		}
	}
}
