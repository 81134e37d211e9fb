package image

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
)

func TestEndpoints(t *testing.T) {
	regs, err := newRegistries(map[string]RegistryHost{
		"registry.k8s.io": {Mirrors: []string{"http://127.0.0.1:5000", "https://mirror.example", "10.0.0.1:5000"}},
		"docker.io":       {Mirrors: []string{"http://localhost:5001"}, Username: "hub", Password: "pw"},
		"10.0.0.1:5000":   {Insecure: true},
		"private.example": {Auth: "dXNlcjpwYXNz"},
	})
	if err != nil {
		t.Fatal(err)
	}
	type ep struct {
		host     string
		insecure bool
		mirror   bool
	}
	tests := []struct {
		registry string
		want     []ep
	}{
		{"registry.k8s.io", []ep{{"127.0.0.1:5000", true, true}, {"mirror.example", false, true}, {"10.0.0.1:5000", true, true}, {"registry.k8s.io", false, false}}},
		{"docker.io", []ep{{"localhost:5001", true, true}, {"index.docker.io", false, false}}},
		{"127.0.0.1:5000", []ep{{"127.0.0.1:5000", true, false}}},
		{"[::1]:5000", []ep{{"[::1]:5000", true, false}}},
		{"10.0.0.1:5000", []ep{{"10.0.0.1:5000", true, false}}},
		{"quay.io", []ep{{"quay.io", false, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.registry, func(t *testing.T) {
			got, err := regs.endpoints(Reference{Registry: tt.registry, Path: "library/x", Tag: "latest"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d endpoints %v, want %v", len(got), got, tt.want)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.host != w.host || g.insecure != w.insecure || g.mirror != w.mirror {
					t.Errorf("endpoint %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestEndpointAuth(t *testing.T) {
	regs, err := newRegistries(map[string]RegistryHost{
		"docker.io":       {Mirrors: []string{"http://127.0.0.1:5000"}, Username: "hub", Password: "pw"},
		"127.0.0.1:5000":  {Username: "mirror", Password: "mpw"},
		"private.example": {Auth: "dXNlcjpwYXNz"},
	})
	if err != nil {
		t.Fatal(err)
	}
	authOf := func(a authn.Authenticator) authn.AuthConfig {
		c, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		return *c
	}
	tests := []struct {
		name     string
		registry string
		req      *AuthConfig
		want     []authn.AuthConfig // per endpoint
	}{
		{"config", "docker.io", nil, []authn.AuthConfig{{Username: "mirror", Password: "mpw"}, {Username: "hub", Password: "pw"}}},
		{"request for all", "docker.io", &AuthConfig{Username: "u", Password: "p"},
			[]authn.AuthConfig{{Username: "u", Password: "p"}, {Username: "u", Password: "p"}}},
		{"request for upstream only", "docker.io", &AuthConfig{Username: "u", Password: "p", ServerAddress: "https://index.docker.io/v1/"},
			[]authn.AuthConfig{{Username: "mirror", Password: "mpw"}, {Username: "u", Password: "p"}}},
		{"request for another host", "private.example", &AuthConfig{Username: "u", Password: "p", ServerAddress: "other.example"},
			[]authn.AuthConfig{{Auth: "dXNlcjpwYXNz"}}},
		{"tokens", "quay.io", &AuthConfig{IdentityToken: "id", RegistryToken: "rt"},
			[]authn.AuthConfig{{IdentityToken: "id", RegistryToken: "rt"}}},
		{"anonymous", "quay.io", &AuthConfig{ServerAddress: "quay.io"}, []authn.AuthConfig{{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps, err := regs.endpoints(Reference{Registry: tt.registry, Path: "library/x", Tag: "latest"}, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if len(eps) != len(tt.want) {
				t.Fatalf("got %d endpoints, want %d", len(eps), len(tt.want))
			}
			for i, w := range tt.want {
				if got := authOf(eps[i].auth); got != w {
					t.Errorf("endpoint %s auth = %+v, want %+v", eps[i], got, w)
				}
			}
		})
	}
}

func TestRegistriesConfigErrors(t *testing.T) {
	tests := map[string]map[string]RegistryHost{
		"mirror with path":   {"docker.io": {Mirrors: []string{"http://127.0.0.1:5000/v2/x"}}},
		"mirror bad scheme":  {"docker.io": {Mirrors: []string{"ftp://127.0.0.1"}}},
		"mirror empty":       {"docker.io": {Mirrors: []string{""}}},
		"key with path":      {"docker.io/library": {}},
		"auth and password":  {"x.example": {Auth: "a", Password: "b"}},
		"docker hub twice":   {"docker.io": {}, "index.docker.io": {}},
		"bare mirror w/path": {"docker.io": {Mirrors: []string{"127.0.0.1:5000/x"}}},
	}
	for name, cfg := range tests {
		if _, err := newRegistries(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
