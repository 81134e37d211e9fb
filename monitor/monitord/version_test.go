package monitord_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/monitor"
)

// rawCall sends one request line as it is and returns the response line.
func rawCall(t *testing.T, sock, line string) *monitor.Response {
	t.Helper()
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	data, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		t.Fatalf("%s: no response: %v", line, err)
	}
	resp := &monitor.Response{}
	if err := json.Unmarshal(data, resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestProtocolVersionServed(t *testing.T) {
	e := start(t)
	tests := []struct {
		name, line string
		refused    bool
	}{
		{name: "current", line: `{"version":1,"op":"ping"}`},
		// Berths before versions sent none.
		{name: "unversioned", line: `{"op":"ping"}`},
		{name: "newer", line: `{"version":99,"op":"shutdown"}`, refused: true},
		{name: "newer stream", line: `{"version":2,"op":"attach","id":"c1","stream":{"stdout":true}}`, refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rawCall(t, e.client.Socket, tt.line)
			if resp.Version != monitor.ProtocolVersion {
				t.Errorf("response version %d, want %d", resp.Version, monitor.ProtocolVersion)
			}
			if !tt.refused {
				if resp.Error != "" || resp.Pid == 0 {
					t.Fatalf("%+v", resp)
				}
				return
			}
			if resp.Code != monitor.CodeVersion || !strings.Contains(resp.Error, "speaks protocol versions 1 to 1, not the call's version") {
				t.Fatalf("not refused for its version: %+v", resp)
			}
		})
	}
	// The refused shutdown was not acted on: the monitor still serves,
	// and through the client a refusal is ErrVersion.
	e.call(&monitor.Request{Op: monitor.OpPing})
	_, err := e.client.Call(ctx(t), &monitor.Request{Version: 42, Op: monitor.OpShutdown})
	if !errors.Is(err, monitor.ErrVersion) || !strings.Contains(err.Error(), "not the call's version 42") {
		t.Fatalf("call of version 42: %v", err)
	}
	e.call(&monitor.Request{Op: monitor.OpPing})
}
