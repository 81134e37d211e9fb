package kubehost

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestStandaloneGet(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/pods":
			w.Write([]byte(`{"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`))
		default:
			http.Error(w, "no such page", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	s := Standalone{Address: host}
	s.Port, _ = strconv.Atoi(port)
	c := srv.Client()

	type pod struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	pods, err := Pods[pod](s, c)
	if err != nil || len(pods) != 2 || pods[1].Metadata.Name != "b" {
		t.Fatalf("Pods = %+v, %v; want a and b", pods, err)
	}
	if _, err := s.Get(c, "/missing"); err == nil || !strings.Contains(err.Error(), "GET /missing: 404 Not Found: no such page") {
		t.Errorf("Get(/missing) err = %v, want the status and the body", err)
	}
	cfg := s.Config()
	if cfg["port"] != s.Port || cfg["address"] != host || cfg["kind"] != "KubeletConfiguration" {
		t.Errorf("config = %v", cfg)
	}
}
