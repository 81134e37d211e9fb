package image

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// kindHostsToml is what kind's local-registry guide writes into every
// node (site/static/examples/kind-with-registry.sh).
const kindHostsToml = "[host.\"http://kind-registry:5000\"]\n"

// shortEntry is what a test compares of a hostEntry.
type shortEntry struct {
	Scheme, Host, APIRoot string
	Pull, Resolve, Server bool
	TLS                   bool
	Header                http.Header
}

func short(es []hostEntry) []shortEntry {
	out := make([]shortEntry, len(es))
	for i, e := range es {
		out[i] = shortEntry{e.scheme, e.host, e.apiRoot, e.pull, e.resolve, e.server, e.tls != nil, e.header}
	}
	return out
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// testCA is a TLS server's certificate as a PEM file in dir.
func testCA(t *testing.T, srv *httptest.Server, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ca.crt")
	writeFile(t, p, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	return p
}

// otherCA is a self-signed certificate no test server uses, as PEM.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestParseHostsFile(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	dir := t.TempDir()
	testCA(t, tlsSrv, dir)
	server := shortEntry{Pull: true, Resolve: true, Server: true}
	tests := []struct {
		name    string
		toml    string
		want    []shortEntry
		wantErr string
	}{
		{name: "kind's guide", toml: kindHostsToml, want: []shortEntry{
			{Scheme: "http", Host: "kind-registry:5000", APIRoot: "/v2", Pull: true, Resolve: true}, server}},
		{name: "empty file", toml: "", want: []shortEntry{server}},
		{name: "hosts in file order, then the server", toml: `
server = "https://registry.example"
[host."https://b.example"]
  capabilities = ["pull", "resolve"]
[host."http://a.example:5000"]
  capabilities = ["pull"]
`, want: []shortEntry{
			{Scheme: "https", Host: "b.example", APIRoot: "/v2", Pull: true, Resolve: true},
			{Scheme: "http", Host: "a.example:5000", APIRoot: "/v2", Pull: true},
			{Scheme: "https", Host: "registry.example", APIRoot: "/v2", Pull: true, Resolve: true, Server: true}}},
		{name: "server without scheme", toml: `server = "registry.example:8443"`, want: []shortEntry{
			{Scheme: "https", Host: "registry.example:8443", APIRoot: "/v2", Pull: true, Resolve: true, Server: true}}},
		{name: "paths", toml: `
[host."https://m.example/sub"]
[host."https://m.example/sub/v2/"]
[host."https://m.example/api/docker"]
  override_path = true
[host."https://m.example"]
  override_path = true
`, want: []shortEntry{
			{Scheme: "https", Host: "m.example", APIRoot: "/sub/v2", Pull: true, Resolve: true},
			{Scheme: "https", Host: "m.example", APIRoot: "/sub/v2", Pull: true, Resolve: true},
			{Scheme: "https", Host: "m.example", APIRoot: "/api/docker", Pull: true, Resolve: true},
			{Scheme: "https", Host: "m.example", APIRoot: "", Pull: true, Resolve: true},
			server}},
		{name: "headers", toml: `
[host."http://m.example".header]
  x-one = "1"
  X-Two = ["a", "b"]
`, want: []shortEntry{
			{Scheme: "http", Host: "m.example", APIRoot: "/v2", Pull: true, Resolve: true, Header: http.Header{"X-One": {"1"}, "X-Two": {"a", "b"}}},
			server}},
		{name: "TLS settings", toml: `
skip_verify = true
[host."https://m.example"]
  ca = "ca.crt"
[host."https://n.example"]
  ca = ["ca.crt", "` + filepath.Join(dir, "ca.crt") + `"]
  dial_timeout = "3s"
`, want: []shortEntry{
			{Scheme: "https", Host: "m.example", APIRoot: "/v2", Pull: true, Resolve: true, TLS: true},
			{Scheme: "https", Host: "n.example", APIRoot: "/v2", Pull: true, Resolve: true, TLS: true},
			{Pull: true, Resolve: true, Server: true, TLS: true}}},
		{name: "push only", toml: "[host.\"https://m.example\"]\ncapabilities = [\"push\"]", want: []shortEntry{
			{Scheme: "https", Host: "m.example", APIRoot: "/v2"}, server}},
		{name: "unknown capability", toml: "[host.\"https://m.example\"]\ncapabilities = [\"fetch\"]", wantErr: `host "https://m.example": unknown capability "fetch"`},
		{name: "bad scheme", toml: "[host.\"ftp://m.example\"]", wantErr: `host "ftp://m.example": scheme must be http or https`},
		{name: "user in URL", toml: "server = \"https://u:p@m.example\"", wantErr: "only scheme, host[:port] and path"},
		{name: "syntax error", toml: "server = \n", wantErr: "line 1"},
		{name: "ca of the wrong type", toml: "[host.\"https://m.example\"]\nca = 5", wantErr: "ca: want a string or a list of strings"},
		{name: "missing ca", toml: "[host.\"https://m.example\"]\nca = \"nope.crt\"", wantErr: "nope.crt: no such file"},
		{name: "not a ca", toml: "[host.\"https://m.example\"]\nca = \"hosts.toml\"", wantErr: "no PEM certificate"},
		{name: "client pair of three", toml: "[host.\"https://m.example\"]\nclient = [[\"a\", \"b\", \"c\"]]", wantErr: "want [cert, key]"},
		{name: "bad dial timeout", toml: "[host.\"https://m.example\"]\ndial_timeout = \"soon\"", wantErr: "dial_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, filepath.Join(dir, hostsFileName), tt.toml)
			hf, err := parseHostsFile(dir, []byte(tt.toml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := short(hf.entries); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("entries\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestHostDirNames(t *testing.T) {
	tests := map[string][]string{
		"docker.io":      {"docker.io"},
		"localhost:5001": {"localhost_5001_", "localhost:5001"},
		"[::1]:5000":     {"[::1]_5000_", "[::1]:5000"},
	}
	for host, want := range tests {
		if got := hostDirNames(host); !reflect.DeepEqual(got, want) {
			t.Errorf("hostDirNames(%s) = %v, want %v", host, got, want)
		}
	}
}

// ep is what a test compares of an endpoint.
type ep struct {
	Host     string
	Insecure bool
	Mirror   bool
	APIRoot  string
}

func TestEndpointsWithHostsDir(t *testing.T) {
	tests := []struct {
		name     string
		files    map[string]string // path below the host dir -> content
		regs     map[string]RegistryHost
		ref      string
		want     []ep
		wantErr  string
		wantAuth []authn.AuthConfig
	}{
		{name: "kind's local registry", files: map[string]string{"localhost:5001/hosts.toml": kindHostsToml}, ref: "localhost:5001/app:1",
			want: []ep{{"kind-registry:5000", true, true, "/v2"}, {"localhost:5001", true, false, ""}}},
		{name: "host_port_ before host:port", files: map[string]string{
			"localhost_5001_/hosts.toml": "[host.\"http://a:5000\"]", "localhost:5001/hosts.toml": "[host.\"http://b:5000\"]"}, ref: "localhost:5001/app:1",
			want: []ep{{"a:5000", true, true, "/v2"}, {"localhost:5001", true, false, ""}}},
		{name: "no directory: [registries] as before", regs: map[string]RegistryHost{"quay.io": {Mirrors: []string{"http://10.0.0.1:5000"}}}, ref: "quay.io/x:1",
			want: []ep{{"10.0.0.1:5000", true, true, ""}, {"quay.io", false, false, ""}}},
		{name: "own hosts.toml over [registries] mirrors", files: map[string]string{"quay.io/hosts.toml": "[host.\"https://m.example\"]"},
			regs: map[string]RegistryHost{"quay.io": {Mirrors: []string{"http://10.0.0.1:5000"}}}, ref: "quay.io/x:1",
			want: []ep{{"m.example", false, true, "/v2"}, {"quay.io", false, false, ""}}},
		{name: "[registries] mirrors over _default", files: map[string]string{"_default/hosts.toml": "[host.\"https://d.example\"]"},
			regs: map[string]RegistryHost{"quay.io": {Mirrors: []string{"http://10.0.0.1:5000"}}}, ref: "quay.io/x:1",
			want: []ep{{"10.0.0.1:5000", true, true, ""}, {"quay.io", false, false, ""}}},
		{name: "_default for every other registry", files: map[string]string{"_default/hosts.toml": "[host.\"https://d.example\"]"}, ref: "ghcr.io/x:1",
			want: []ep{{"d.example", false, true, "/v2"}, {"ghcr.io", false, false, ""}}},
		{name: "server replaces the registry", files: map[string]string{"docker.io/hosts.toml": "server = \"https://registry-1.docker.io\"\n[host.\"http://127.0.0.1:5000\"]"}, ref: "busybox",
			want: []ep{{"127.0.0.1:5000", true, true, "/v2"}, {"registry-1.docker.io", false, false, "/v2"}}},
		{name: "Docker Hub's default server", files: map[string]string{"docker.io/hosts.toml": "[host.\"https://m.example\"]"}, ref: "busybox",
			want: []ep{{"m.example", false, true, "/v2"}, {"index.docker.io", false, false, ""}}},
		{name: "insecure of [registries] applies to a host of hosts.toml", files: map[string]string{"quay.io/hosts.toml": "[host.\"https://m.example\"]"},
			regs: map[string]RegistryHost{"m.example": {Insecure: true}}, ref: "quay.io/x:1",
			want: []ep{{"m.example", true, true, "/v2"}, {"quay.io", false, false, ""}}},
		{name: "pull-only host not asked for a tag", files: map[string]string{"quay.io/hosts.toml": "[host.\"https://p.example\"]\ncapabilities = [\"pull\"]\n[host.\"https://r.example\"]\ncapabilities = [\"pull\", \"resolve\"]"},
			ref: "quay.io/x:1", want: []ep{{"r.example", false, true, "/v2"}, {"quay.io", false, false, ""}}},
		{name: "pull-only host asked for a digest", files: map[string]string{"quay.io/hosts.toml": "[host.\"https://p.example\"]\ncapabilities = [\"pull\"]"},
			ref: "quay.io/x@sha256:" + strings.Repeat("a", 64), want: []ep{{"p.example", false, true, "/v2"}, {"quay.io", false, false, ""}}},
		{name: "no host may resolve", files: map[string]string{"quay.io/hosts.toml": "capabilities = [\"pull\"]"}, ref: "quay.io/x:1", wantErr: "no host may resolve tag 1"},
		{name: "nothing to pull from", files: map[string]string{"quay.io/hosts.toml": "capabilities = [\"push\"]"},
			ref: "quay.io/x@sha256:" + strings.Repeat("a", 64), wantErr: "no host to pull from"},
		{name: "push-only hosts never pulled from", files: map[string]string{"quay.io/hosts.toml": "[host.\"https://p.example\"]\ncapabilities = [\"push\"]"},
			ref: "quay.io/x:1", want: []ep{{"quay.io", false, false, ""}}},
		{name: "Docker's certs.d layout", files: map[string]string{"quay.io/README": "no hosts.toml"}, ref: "quay.io/x:1", want: []ep{{"quay.io", false, false, ""}}},
		{name: "broken file fails the pull", files: map[string]string{"quay.io/hosts.toml": "[host"}, ref: "quay.io/x:1", wantErr: "quay.io/hosts.toml: line 1"},
		{name: "credentials by host", files: map[string]string{"quay.io/hosts.toml": "[host.\"https://m.example\"]"},
			regs: map[string]RegistryHost{"m.example": {Username: "mu", Password: "mp"}, "quay.io": {Username: "qu", Password: "qp"}}, ref: "quay.io/x:1",
			want:     []ep{{"m.example", false, true, "/v2"}, {"quay.io", false, false, ""}},
			wantAuth: []authn.AuthConfig{{Username: "mu", Password: "mp"}, {Username: "qu", Password: "qp"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for p, body := range tt.files {
				writeFile(t, filepath.Join(root, p), body)
			}
			regs, err := newRegistries(tt.regs)
			if err != nil {
				t.Fatal(err)
			}
			regs.useHostsDir(root, slog.New(slog.DiscardHandler), time.Minute)
			ref, err := ParseReference(tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			eps, err := regs.endpoints(ref, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []ep
			for _, e := range eps {
				got = append(got, ep{e.host, e.insecure, e.mirror, e.apiRoot})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("endpoints\n got %+v\nwant %+v", got, tt.want)
			}
			for i, w := range tt.wantAuth {
				a, err := eps[i].auth.Authorization()
				if err != nil || *a != w {
					t.Errorf("endpoint %s auth = %+v, %v; want %+v", eps[i], a, err, w)
				}
			}
		})
	}
}

// TestHostsDirFollowsFiles: a file written, changed, broken or removed
// after start counts from the next pull on.
func TestHostsDirFollowsFiles(t *testing.T) {
	root := t.TempDir()
	regs, err := newRegistries(nil)
	if err != nil {
		t.Fatal(err)
	}
	regs.useHostsDir(root, slog.New(slog.DiscardHandler), time.Minute)
	ref, _ := ParseReference("localhost:5001/app:1")
	hosts := func() string {
		t.Helper()
		eps, err := regs.endpoints(ref, nil)
		if err != nil {
			return "error: " + err.Error()
		}
		var hs []string
		for _, e := range eps {
			hs = append(hs, e.host)
		}
		return strings.Join(hs, " ")
	}
	file := filepath.Join(root, "localhost:5001", hostsFileName)
	steps := []struct {
		name  string
		write func()
		want  string
	}{
		{"nothing yet", func() {}, "localhost:5001"},
		{"written after start", func() { writeFile(t, file, kindHostsToml) }, "kind-registry:5000 localhost:5001"},
		{"rewritten in place", func() { writeFile(t, file, "[host.\"http://other-registry:5000\"]\n") }, "other-registry:5000 localhost:5001"},
		{"broken", func() { writeFile(t, file, "[host.\"http://other-registry:5000\"\n") }, "error: registry host configuration " + file + ": line "},
		{"fixed", func() { writeFile(t, file, kindHostsToml) }, "kind-registry:5000 localhost:5001"},
		{"removed", func() { os.RemoveAll(filepath.Dir(file)) }, "localhost:5001"},
	}
	for _, s := range steps {
		s.write()
		if got := hosts(); !strings.HasPrefix(got, s.want) {
			t.Fatalf("%s: endpoints %q, want %q", s.name, got, s.want)
		}
	}
}

// TestEndpointTransport: requests reach a hosts.toml host under its API
// root, with its headers, through its own TLS settings.
func TestEndpointTransport(t *testing.T) {
	type seen struct{ path, header string }
	got := make(chan seen, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.Header.Get("X-Mirror")}
		io.WriteString(w, "{}")
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	secure := httptest.NewTLSServer(handler)
	defer secure.Close()
	dir := t.TempDir()
	testCA(t, secure, dir)
	writeFile(t, filepath.Join(dir, "other", "ca.crt"), otherCA(t))

	s := &Service{secure: newHTTPTransport(false), insecure: newHTTPTransport(true)}
	tests := []struct {
		name, toml, url string
		wantPath        string
		wantHeader      string
		wantErr         string
	}{
		{name: "API at the root", toml: fmt.Sprintf("[host.%q]", plain.URL), url: plain.URL + "/v2/app/manifests/1", wantPath: "/v2/app/manifests/1"},
		{name: "API under a path", toml: fmt.Sprintf("[host.%q]", plain.URL+"/mirror"), url: plain.URL + "/v2/app/manifests/1", wantPath: "/mirror/v2/app/manifests/1"},
		{name: "override_path", toml: fmt.Sprintf("[host.%q]\noverride_path = true", plain.URL+"/api/docker"), url: plain.URL + "/v2/", wantPath: "/api/docker/"},
		{name: "header", toml: fmt.Sprintf("[host.%q.header]\nx-mirror = \"yes\"", plain.URL), url: plain.URL + "/v2/", wantPath: "/v2/", wantHeader: "yes"},
		{name: "another host untouched", toml: fmt.Sprintf("[host.%q]", "http://elsewhere:5000/mirror"), url: plain.URL + "/v2/", wantPath: "/v2/"},
		{name: "ca", toml: fmt.Sprintf("[host.%q]\nca = \"ca.crt\"", secure.URL), url: secure.URL + "/v2/", wantPath: "/v2/"},
		{name: "skip_verify", toml: fmt.Sprintf("[host.%q]\nskip_verify = true", secure.URL), url: secure.URL + "/v2/", wantPath: "/v2/"},
		// Loopback hosts are insecure by default; a ca makes it verified.
		{name: "other CA refused", toml: fmt.Sprintf("[host.%q]\nca = \"other/ca.crt\"", secure.URL), url: secure.URL + "/v2/", wantErr: "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hf, err := parseHostsFile(dir, []byte(tt.toml))
			if err != nil {
				t.Fatal(err)
			}
			newHostsDir(dir, slog.New(slog.DiscardHandler), func(cfg *tls.Config) http.RoundTripper { return newHTTPTransportTLS(cfg) }).buildTransports(hf)
			regs, _ := newRegistries(nil)
			e := regs.fromHostsFile("quay.io", hf, nil)[0]
			req, _ := http.NewRequest(http.MethodGet, tt.url, nil)
			resp, err := s.endpointTransport(e).RoundTrip(req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if g := <-got; g.path != tt.wantPath || g.header != tt.wantHeader {
				t.Errorf("server saw %q with X-Mirror %q, want %q, %q", g.path, g.header, tt.wantPath, tt.wantHeader)
			}
		})
	}
}
