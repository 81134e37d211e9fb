package image

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
)

// This file reads registry host directories in containerd's format
// (its config_path; /etc/containerd/certs.d in kind nodes), so that
// tooling written for containerd nodes, kind's local-registry guide
// first, works unchanged:
//
//	<root>/<host>/hosts.toml     (or <host_port_>/, as containerd spells ports)
//	<root>/_default/hosts.toml   for hosts without a directory of their own
//
// A hosts.toml lists hosts tried in order, then the registry's server:
//
//	server = "https://registry.example"        # default: the registry itself
//	[host."http://kind-registry:5000"]
//	  capabilities = ["pull", "resolve"]       # default: all
//	  skip_verify = false
//	  ca = "ca.crt"                            # or a list; relative to the directory
//	  client = [["client.cert", "client.key"]] # or one file holding both, or a list of such
//	  override_path = false                    # the URL's path is the API root, not <path>/v2
//	  [host."http://kind-registry:5000".header]
//	    x-custom = "value"
//
// A directory without hosts.toml holds Docker's certs.d layout instead:
// *.crt are CAs, <name>.cert with <name>.key client key pairs, for the
// registry itself.
//
// Files are read when a pull needs them and read again when they change
// (a stat per file a pull uses), so a file written after berth started,
// as kind's guide does, counts from the next pull on.

const (
	hostsFileName     = "hosts.toml"
	defaultHostsDir   = "_default"
	defaultAPIRoot    = "/v2"
	capabilityPull    = "pull"
	capabilityResolve = "resolve"
	capabilityPush    = "push"
)

// hostEntry is one host of a hosts.toml: a mirror, or the server.
type hostEntry struct {
	scheme string // http or https; empty for a server left to the defaults
	host   string // host[:port]; empty for a server left to the defaults
	// apiRoot is the URL path the registry API is served under: /v2,
	// <path>/v2, or the path itself with override_path.
	apiRoot       string
	pull, resolve bool
	header        http.Header
	server        bool // the last entry: the registry itself, or its server key
	// tls is set when the entry has TLS settings of its own (skip_verify,
	// ca, client); transport is then built for it alone.
	tls       *tls.Config
	transport http.RoundTripper
}

// hostsFile is a parsed host directory.
type hostsFile struct {
	dir     string
	path    string   // the hosts.toml, or the directory for Docker's layout
	files   []string // every file read, whose stats make stamp
	stamp   string
	entries []hostEntry
	err     error
	// warned records that this version of the file was logged as
	// overriding [registries] mirrors.
	warned bool
}

// hostsDir finds and caches host directories below root.
type hostsDir struct {
	root string
	log  *slog.Logger
	// newTransport builds the connection pool of an entry with TLS
	// settings of its own.
	newTransport func(*tls.Config) http.RoundTripper

	mu    sync.Mutex
	files map[string]*hostsFile // by directory
}

func newHostsDir(root string, log *slog.Logger, newTransport func(*tls.Config) http.RoundTripper) *hostsDir {
	return &hostsDir{root: root, log: log, newTransport: newTransport, files: map[string]*hostsFile{}}
}

// hostDirNames are the directories that may configure host, most
// specific first, as containerd looks them up: with a port, host_port_
// before host:port, which not every filesystem tool likes.
func hostDirNames(host string) []string {
	var names []string
	if i := strings.LastIndex(host, ":"); i > 0 {
		names = append(names, host[:i]+"_"+host[i+1:]+"_")
	}
	return append(names, host)
}

// lookup returns the configuration of registry host: from its own
// directory, else from _default (isDefault), else nil. A file that does
// not parse is an error, not a silent fall back to the registry itself.
func (d *hostsDir) lookup(host string) (hf *hostsFile, isDefault bool, err error) {
	if d == nil {
		return nil, false, nil
	}
	for _, name := range append(hostDirNames(host), defaultHostsDir) {
		dir := filepath.Join(d.root, name)
		st, err := os.Stat(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("registry host directory: %w", err)
		}
		if !st.IsDir() {
			continue
		}
		hf := d.load(dir)
		if hf.err != nil {
			return nil, false, hf.err
		}
		return hf, name == defaultHostsDir, nil
	}
	return nil, false, nil
}

// load returns dir's configuration, parsed again only when one of the
// files it came from (or the hosts.toml it lacked) changed.
func (d *hostsDir) load(dir string) *hostsFile {
	d.mu.Lock()
	defer d.mu.Unlock()
	if hf := d.files[dir]; hf != nil && hf.stamp == stampFiles(append([]string{dir, filepath.Join(dir, hostsFileName)}, hf.files...)) {
		return hf
	}
	hf := d.parseDir(dir)
	hf.stamp = stampFiles(append([]string{dir, filepath.Join(dir, hostsFileName)}, hf.files...))
	if old := d.files[dir]; old != nil {
		closeIdle(old)
	}
	d.files[dir] = hf
	if hf.err != nil {
		d.log.Warn("registry host configuration not usable", "path", hf.path, "error", hf.err)
	} else {
		d.log.Info("loaded registry host configuration", "path", hf.path, "hosts", len(hf.entries)-1)
	}
	return hf
}

// closeIdle lets the pools of a replaced configuration go.
func closeIdle(hf *hostsFile) {
	for _, e := range hf.entries {
		if c, ok := e.transport.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// stampFiles fingerprints files by what a stat says (a missing file
// counts as its own state): a file rewritten in place or renamed over
// changes size, mtime or inode.
func stampFiles(files []string) string {
	var b strings.Builder
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "%s:-;", f)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d:%v;", f, st.Size(), st.ModTime().UnixNano(), inode(st))
	}
	return b.String()
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

func (d *hostsDir) parseDir(dir string) *hostsFile {
	p := filepath.Join(dir, hostsFileName)
	data, err := os.ReadFile(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		hf := parseCertDir(dir)
		d.buildTransports(hf)
		return hf
	case err != nil:
		return &hostsFile{dir: dir, path: p, err: fmt.Errorf("registry host configuration %s: %w", p, err)}
	}
	hf, err := parseHostsFile(dir, data)
	if err != nil {
		return &hostsFile{dir: dir, path: p, err: fmt.Errorf("registry host configuration %s: %w", p, err)}
	}
	d.buildTransports(hf)
	return hf
}

// buildTransports gives every entry with TLS settings its own pool.
func (d *hostsDir) buildTransports(hf *hostsFile) {
	if hf.err != nil {
		return
	}
	for i := range hf.entries {
		if e := &hf.entries[i]; e.tls != nil {
			e.transport = d.newTransport(e.tls)
		}
	}
}

// hostFileConfig is one host's table in hosts.toml (the top level is the
// server's).
type hostFileConfig struct {
	Capabilities []string       `toml:"capabilities"`
	CA           any            `toml:"ca"`
	Client       any            `toml:"client"`
	SkipVerify   *bool          `toml:"skip_verify"`
	Header       map[string]any `toml:"header"`
	OverridePath bool           `toml:"override_path"`
	// DialTimeout is accepted, as containerd's files may set it, and not
	// applied: berth's pools have their own connect timeout.
	DialTimeout string `toml:"dial_timeout"`
}

// parseHostsFile parses the hosts.toml of dir: its hosts in the order
// the file lists them, then the server.
func parseHostsFile(dir string, data []byte) (*hostsFile, error) {
	var doc struct {
		hostFileConfig
		Server string                    `toml:"server"`
		Host   map[string]hostFileConfig `toml:"host"`
	}
	md, err := toml.Decode(string(data), &doc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return nil, err
	}
	// The map forgets the order; the file's keys keep it.
	var order []string
	for _, k := range md.Keys() {
		if len(k) >= 2 && k[0] == "host" && !slices.Contains(order, k[1]) {
			order = append(order, k[1])
		}
	}
	hf := &hostsFile{dir: dir, path: filepath.Join(dir, hostsFileName)}
	for _, h := range order {
		e, files, err := parseHostEntry(h, dir, doc.Host[h])
		if err != nil {
			return nil, fmt.Errorf("host %q: %w", h, err)
		}
		hf.entries = append(hf.entries, e)
		hf.files = append(hf.files, files...)
	}
	e, files, err := parseHostEntry(doc.Server, dir, doc.hostFileConfig)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", doc.Server, err)
	}
	e.server = true
	hf.entries = append(hf.entries, e)
	hf.files = append(hf.files, files...)
	return hf, nil
}

// parseHostEntry reads one host (an empty server is the registry itself,
// filled in later). It returns the files the entry reads, so that a
// changed CA counts as a changed configuration.
func parseHostEntry(server, dir string, c hostFileConfig) (hostEntry, []string, error) {
	var e hostEntry
	if server != "" {
		if !strings.HasPrefix(server, "http://") && !strings.HasPrefix(server, "https://") {
			if strings.Contains(server, "://") {
				return e, nil, errors.New("scheme must be http or https")
			}
			server = "https://" + server
		}
		u, err := url.Parse(server)
		if err != nil {
			return e, nil, err
		}
		if u.Host == "" {
			return e, nil, errors.New("no host")
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return e, nil, errors.New("only scheme, host[:port] and path are supported")
		}
		e.scheme, e.host = u.Scheme, u.Host
		root := defaultAPIRoot
		if u.Path != "" && u.Path != "/" {
			root = path.Clean(u.Path)
			if !c.OverridePath && !strings.HasSuffix(root, defaultAPIRoot) {
				root += defaultAPIRoot
			}
		} else if c.OverridePath {
			root = ""
		}
		e.apiRoot = root
	}
	if c.Capabilities == nil {
		e.pull, e.resolve = true, true
	}
	for _, capability := range c.Capabilities {
		switch strings.ToLower(capability) {
		case capabilityPull:
			e.pull = true
		case capabilityResolve:
			e.resolve = true
		case capabilityPush:
		default:
			return e, nil, fmt.Errorf("unknown capability %q (want pull, resolve or push)", capability)
		}
	}
	if len(c.Header) > 0 {
		e.header = http.Header{}
		for k, v := range c.Header {
			vals, err := stringList(v)
			if err != nil {
				return e, nil, fmt.Errorf("header %q: %w", k, err)
			}
			e.header[http.CanonicalHeaderKey(k)] = vals
		}
	}
	if c.DialTimeout != "" {
		if _, err := time.ParseDuration(c.DialTimeout); err != nil {
			return e, nil, fmt.Errorf("dial_timeout: %w", err)
		}
	}
	var cas []string
	if c.CA != nil {
		list, err := stringList(c.CA)
		if err != nil {
			return e, nil, fmt.Errorf("ca: %w", err)
		}
		for _, f := range list {
			cas = append(cas, absIn(dir, f))
		}
	}
	pairs, err := clientPairs(dir, c.Client)
	if err != nil {
		return e, nil, fmt.Errorf("client: %w", err)
	}
	if c.SkipVerify == nil && cas == nil && pairs == nil {
		return e, nil, nil
	}
	cfg, files, err := tlsConfig(c.SkipVerify != nil && *c.SkipVerify, cas, pairs)
	if err != nil {
		return e, nil, err
	}
	e.tls = cfg
	return e, files, nil
}

// clientPairs reads containerd's three spellings of client keys: one
// file holding both, a list of such files, or a list of [cert, key].
func clientPairs(dir string, v any) ([][2]string, error) {
	if v == nil {
		return nil, nil
	}
	if s, ok := v.(string); ok {
		return [][2]string{{absIn(dir, s), ""}}, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want a file or a list, got %T", v)
	}
	var pairs [][2]string
	for _, item := range list {
		switch it := item.(type) {
		case string:
			pairs = append(pairs, [2]string{absIn(dir, it), ""})
		case []any:
			files, err := stringList(it)
			if err != nil || len(files) != 2 {
				return nil, fmt.Errorf("want [cert, key], got %v", it)
			}
			pairs = append(pairs, [2]string{absIn(dir, files[0]), absIn(dir, files[1])})
		default:
			return nil, fmt.Errorf("want a file or [cert, key], got %T", item)
		}
	}
	return pairs, nil
}

func stringList(v any) ([]string, error) {
	switch t := v.(type) {
	case string:
		return []string{t}, nil
	case []any:
		out := make([]string, 0, len(t))
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("want strings, got %T", x)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a string or a list of strings, got %T", v)
}

func absIn(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// tlsConfig builds the TLS settings of one host: the system's CAs plus
// cas, the client key pairs (a pair with no key file has both in its
// cert file). It returns the files it read.
func tlsConfig(skipVerify bool, cas []string, pairs [][2]string) (*tls.Config, []string, error) {
	cfg := &tls.Config{InsecureSkipVerify: skipVerify} //nolint:gosec // only for hosts configured skip_verify
	var files []string
	if len(cas) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		for _, f := range cas {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, nil, fmt.Errorf("ca: %w", err)
			}
			if !pool.AppendCertsFromPEM(data) {
				return nil, nil, fmt.Errorf("ca %s: no PEM certificate in it", f)
			}
			files = append(files, f)
		}
		cfg.RootCAs = pool
	}
	for _, p := range pairs {
		certPEM, err := os.ReadFile(p[0])
		if err != nil {
			return nil, nil, fmt.Errorf("client: %w", err)
		}
		keyPEM := certPEM
		files = append(files, p[0])
		if p[1] != "" {
			if keyPEM, err = os.ReadFile(p[1]); err != nil {
				return nil, nil, fmt.Errorf("client: %w", err)
			}
			files = append(files, p[1])
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("client %s: %w", p[0], err)
		}
		cfg.Certificates = append(cfg.Certificates, cert)
	}
	return cfg, files, nil
}

// parseCertDir reads Docker's certs.d layout: a directory without
// hosts.toml configures the registry itself, with every *.crt as a CA
// and every <name>.cert with its <name>.key as a client key pair.
func parseCertDir(dir string) *hostsFile {
	hf := &hostsFile{dir: dir, path: dir}
	entries, err := os.ReadDir(dir)
	if err != nil {
		hf.err = fmt.Errorf("registry host directory %s: %w", dir, err)
		return hf
	}
	var cas []string
	var pairs [][2]string
	for _, de := range entries {
		name := de.Name()
		switch filepath.Ext(name) {
		case ".crt":
			cas = append(cas, filepath.Join(dir, name))
		case ".cert":
			key := strings.TrimSuffix(name, ".cert") + ".key"
			if _, err := os.Stat(filepath.Join(dir, key)); err != nil {
				hf.err = fmt.Errorf("registry host directory %s: client certificate %s has no %s", dir, name, key)
				return hf
			}
			pairs = append(pairs, [2]string{filepath.Join(dir, name), filepath.Join(dir, key)})
		}
		hf.files = append(hf.files, filepath.Join(dir, name))
	}
	e := hostEntry{pull: true, resolve: true, server: true}
	if cas != nil || pairs != nil {
		cfg, _, err := tlsConfig(false, cas, pairs)
		if err != nil {
			hf.err = fmt.Errorf("registry host directory %s: %w", dir, err)
			return hf
		}
		e.tls = cfg
	}
	hf.entries = []hostEntry{e}
	return hf
}
