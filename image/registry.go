package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// RegistryHost is the configuration of one registry, keyed by its host
// (docker.io, registry.k8s.io, 127.0.0.1:5000) in Options.Registries.
type RegistryHost struct {
	// Mirrors are tried in order before the registry itself. Each is a URL
	// (http://127.0.0.1:5000, https://mirror.example) or a bare host, which
	// then follows the rules of its own RegistryHost entry.
	Mirrors []string
	// Insecure allows plain HTTP and unverified TLS, as Docker's
	// insecure-registries does. Loopback hosts are insecure by default.
	Insecure bool
	// Credentials used when the pull request carries none for this host.
	Username      string
	Password      string
	Auth          string // base64 of user:password, as in ~/.docker/config.json
	IdentityToken string
}

// AuthConfig is the credential part of a CRI PullImageRequest.
type AuthConfig struct {
	Username      string
	Password      string
	Auth          string
	ServerAddress string
	IdentityToken string
	RegistryToken string
}

// fingerprint tells credentials apart without keeping them in a map key:
// pulls share a run only when they would send the same credentials.
func (a *AuthConfig) fingerprint() string {
	if a.empty() {
		return ""
	}
	h := sha256.New()
	for _, f := range []string{a.Username, a.Password, a.Auth, a.ServerAddress, a.IdentityToken, a.RegistryToken} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (a *AuthConfig) empty() bool {
	return a == nil || (a.Username == "" && a.Password == "" && a.Auth == "" && a.IdentityToken == "" && a.RegistryToken == "")
}

// endpoint is one place an image can be fetched from.
type endpoint struct {
	host     string // host[:port] requests go to
	insecure bool   // plain HTTP allowed, TLS unverified (unless transport says otherwise)
	mirror   bool
	auth     authn.Authenticator
	// resolve: the endpoint may say which manifest a tag names (a
	// hosts.toml host without the resolve capability is only asked for
	// content by digest).
	resolve bool
	// From a hosts.toml: the API root when it is not /v2, headers sent
	// with every request, and a pool with the host's own TLS settings.
	apiRoot   string
	header    http.Header
	transport http.RoundTripper
}

func (e endpoint) String() string {
	where := e.host
	if e.apiRoot != "" && e.apiRoot != defaultAPIRoot {
		where += e.apiRoot
	}
	if e.mirror {
		return "mirror " + where
	}
	return where
}

// registries is the validated registry configuration.
type registries struct {
	hosts map[string]RegistryHost
	// mirrors are parsed from hosts at construction so that a typo is a
	// start-up error, not a pull-time surprise.
	mirrors map[string][]mirrorURL
	// dir is containerd's registry host directory (certs.d), read per
	// pull; nil without one.
	dir *hostsDir
	log *slog.Logger
}

type mirrorURL struct {
	host     string
	insecure bool // set by an http:// scheme
	explicit bool // the URL had a scheme
}

func newRegistries(cfg map[string]RegistryHost) (*registries, error) {
	r := &registries{hosts: map[string]RegistryHost{}, mirrors: map[string][]mirrorURL{}, log: slog.Default()}
	for key, h := range cfg {
		host := canonicalRegistry(strings.TrimSuffix(key, "/"))
		if host == "" || strings.Contains(host, "/") {
			return nil, fmt.Errorf("registry %q: key must be a host[:port]", key)
		}
		if _, dup := r.hosts[host]; dup {
			return nil, fmt.Errorf("registry %q configured twice", host)
		}
		if h.Auth != "" && (h.Username != "" || h.Password != "") {
			return nil, fmt.Errorf("registry %q: set auth or username/password, not both", key)
		}
		r.hosts[host] = h
		for _, m := range h.Mirrors {
			mu, err := parseMirror(m)
			if err != nil {
				return nil, fmt.Errorf("registry %q: mirror %q: %w", key, m, err)
			}
			r.mirrors[host] = append(r.mirrors[host], mu)
		}
	}
	return r, nil
}

func parseMirror(s string) (mirrorURL, error) {
	if !strings.Contains(s, "://") {
		if s == "" || strings.ContainsAny(s, "/?#") {
			return mirrorURL{}, fmt.Errorf("want a URL such as http://127.0.0.1:5000 or a host[:port]")
		}
		return mirrorURL{host: s}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return mirrorURL{}, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return mirrorURL{}, fmt.Errorf("scheme must be http or https")
	}
	if u.Host == "" {
		return mirrorURL{}, fmt.Errorf("no host")
	}
	// go-containerregistry builds /v2/<repository> URLs itself; a path here
	// would be silently ignored, so refuse it instead.
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return mirrorURL{}, fmt.Errorf("only scheme and host[:port] are supported, no path, query or user")
	}
	return mirrorURL{host: u.Host, insecure: u.Scheme == "http", explicit: true}, nil
}

// insecure tells whether plain HTTP is allowed for host.
func (r *registries) insecure(host string) bool {
	return r.hosts[canonicalRegistry(host)].Insecure || isLoopback(host)
}

// isLoopback: Docker talks plain HTTP to registries on the local machine.
func isLoopback(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

// endpoints lists where to fetch ref from, in order. The most specific
// configuration of its registry decides:
//
//  1. <dir>/<host>/hosts.toml: its hosts in order, then its server;
//  2. [registries."<host>"] mirrors, then the registry;
//  3. <dir>/_default/hosts.toml;
//  4. the registry alone.
//
// Credentials and insecure of [registries] apply to whichever host is
// asked (hosts.toml has no credentials). A tag is only asked of hosts
// that may resolve it; every host may serve a digest.
func (r *registries) endpoints(ref Reference, req *AuthConfig) ([]endpoint, error) {
	host := canonicalRegistry(ref.Registry)
	hf, isDefault, err := r.dir.lookup(host)
	if err != nil {
		return nil, err
	}
	var eps []endpoint
	switch {
	case hf != nil && !(isDefault && len(r.mirrors[host]) > 0):
		if !isDefault && len(r.mirrors[host]) > 0 {
			r.warnMirrorsIgnored(hf, host)
		}
		eps = r.fromHostsFile(host, hf, req)
	default:
		eps = r.configured(host, req)
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("registry %s: %s leaves no host to pull from (none has the pull capability)", host, hf.path)
	}
	if ref.Digest != "" {
		return eps, nil
	}
	resolving := slices.DeleteFunc(eps, func(e endpoint) bool { return !e.resolve })
	if len(resolving) == 0 {
		return nil, fmt.Errorf("registry %s: no host may resolve tag %s (none has the resolve capability); pull it by digest", host, ref.Tag)
	}
	return resolving, nil
}

// warnMirrorsIgnored says once per version of a hosts.toml that it
// overrides the [registries] mirrors of its host.
func (r *registries) warnMirrorsIgnored(hf *hostsFile, host string) {
	r.dir.mu.Lock()
	defer r.dir.mu.Unlock()
	if !hf.warned {
		hf.warned = true
		r.log.Warn("registry mirrors of [registries] not used: the host's hosts.toml decides", "registry", host, "path", hf.path)
	}
}

// fromHostsFile turns a host directory's entries into endpoints.
func (r *registries) fromHostsFile(host string, hf *hostsFile, req *AuthConfig) []endpoint {
	eps := make([]endpoint, 0, len(hf.entries))
	for _, e := range hf.entries {
		if !e.pull {
			continue
		}
		ep := endpoint{
			host:      e.host,
			insecure:  e.scheme == "http" || r.insecure(e.host),
			mirror:    !e.server,
			resolve:   e.resolve,
			apiRoot:   e.apiRoot,
			header:    e.header,
			transport: e.transport,
		}
		switch {
		case e.server && e.host == "":
			// The registry itself, as if no file named it.
			ep.host, ep.insecure, ep.apiRoot = apiHost(host), r.insecure(host), ""
			ep.auth = r.auth(host, req)
		case e.server:
			// Another name for the registry: its credentials go there.
			ep.auth = r.auth(host, req)
		default:
			ep.auth = r.auth(e.host, req)
		}
		eps = append(eps, ep)
	}
	return eps
}

// configured lists [registries] mirrors in order, then the registry.
func (r *registries) configured(host string, req *AuthConfig) []endpoint {
	var eps []endpoint
	for _, m := range r.mirrors[host] {
		eps = append(eps, endpoint{
			host:     m.host,
			insecure: m.insecure || r.insecure(m.host),
			mirror:   true,
			resolve:  true,
			auth:     r.auth(m.host, req),
		})
	}
	return append(eps, endpoint{host: apiHost(host), insecure: r.insecure(host), resolve: true, auth: r.auth(host, req)})
}

// apiHost is where a registry's API is: Docker Hub's is not docker.io.
func apiHost(host string) string {
	if host == dockerHub {
		return "index.docker.io"
	}
	return host
}

// auth picks the credentials for host. Credentials from the request win
// when they are meant for host (no server address, or this one); as in
// containerd, credentials meant for the upstream are not sent to a mirror.
func (r *registries) auth(host string, req *AuthConfig) authn.Authenticator {
	if !req.empty() && (req.ServerAddress == "" || serverHost(req.ServerAddress) == canonicalRegistry(host)) {
		return authn.FromConfig(authn.AuthConfig{
			Username:      req.Username,
			Password:      req.Password,
			Auth:          req.Auth,
			IdentityToken: req.IdentityToken,
			RegistryToken: req.RegistryToken,
		})
	}
	h, ok := r.hosts[canonicalRegistry(host)]
	if !ok || (h.Username == "" && h.Password == "" && h.Auth == "" && h.IdentityToken == "") {
		return authn.Anonymous
	}
	return authn.FromConfig(authn.AuthConfig{
		Username:      h.Username,
		Password:      h.Password,
		Auth:          h.Auth,
		IdentityToken: h.IdentityToken,
	})
}

// serverHost reduces a docker-config style server address
// (https://index.docker.io/v1/, registry.example:5000) to a host.
func serverHost(addr string) string {
	if strings.Contains(addr, "://") {
		if u, err := url.Parse(addr); err == nil {
			addr = u.Host
		}
	}
	addr, _, _ = strings.Cut(addr, "/")
	return canonicalRegistry(addr)
}
