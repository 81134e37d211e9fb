package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ValueError is an invalid value of one key.
type ValueError struct {
	Key   string // TOML key path, e.g. cni.conf_dir
	Value string // redacted for secret keys
	Want  string
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("invalid %s %q: want %s", e.Key, e.Value, e.Want)
}

// Validate checks every key against its check tag and returns the first
// failure as a *ValueError.
func (c *Config) Validate() error {
	if err := walkLeaves(nil, reflect.ValueOf(c).Elem(), validateLeaf); err != nil {
		return err
	}
	return c.validateCombinations()
}

// validateCombinations checks keys that only make sense together.
func (c *Config) validateCombinations() error {
	for name := range c.Runtimes {
		if !isDNSLabel(name) {
			return &ValueError{Key: "runtimes", Value: name, Want: "a runtime handler name that is a DNS label (lowercase letters, digits and '-', at most 63), as a RuntimeClass's handler"}
		}
	}
	if _, ok := c.Runtimes[c.DefaultRuntime]; !ok {
		return &ValueError{Key: "default_runtime", Value: c.DefaultRuntime, Want: "the name of a [runtimes] table (" + alternatives(sortedNames(c.Runtimes)) + ")"}
	}
	if n := c.Tracing.SamplingRatePerMillion; n < 0 || n > 1_000_000 {
		return &ValueError{Key: "tracing.sampling_rate_per_million", Value: strconv.Itoa(n), Want: "0 to 1000000"}
	}
	if c.CNI.DefaultPodCIDR {
		if !c.CNI.DefaultNetwork {
			return errors.New("cni.default_pod_cidr needs cni.default_network = true")
		}
		if c.CNI.DefaultSubnet != "" {
			return errors.New("cni.default_pod_cidr and cni.default_subnet exclude each other: the pod CIDR is the default network's subnet")
		}
	}
	return nil
}

func validateLeaf(l leaf) error {
	var values []string
	switch v := l.value.Interface().(type) {
	case string:
		values = []string{v}
	case []string:
		values = v
	default:
		if l.checks() != "" {
			return fmt.Errorf("config key %s: checks apply to strings and string lists only", l.key())
		}
		return nil
	}
	for _, name := range strings.Fields(l.checks()) {
		for _, v := range values {
			want, err := check(name, v)
			if err != nil {
				return fmt.Errorf("config key %s: %w", l.key(), err)
			}
			if want == "" {
				continue
			}
			shown := v
			if l.secret() {
				shown = "<redacted>"
			}
			return &ValueError{Key: l.key(), Value: shown, Want: want}
		}
	}
	return nil
}

// check runs the named check on v and returns what was wanted if v fails
// it. Except for "required", an empty value passes: it means "unset".
func check(name, v string) (want string, err error) {
	name, arg, _ := strings.Cut(name, "=")
	if v == "" && name != "required" {
		return "", nil
	}
	switch name {
	case "required":
		if v == "" {
			return "a non-empty value", nil
		}
	case "abs":
		if !filepath.IsAbs(v) {
			return "an absolute path", nil
		}
	case "oneof":
		allowed := strings.Split(arg, "|")
		for _, a := range allowed {
			if v == a {
				return "", nil
			}
		}
		return alternatives(allowed), nil
	case "hostport":
		_, port, err := net.SplitHostPort(v)
		if err != nil {
			return "host:port", nil
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return "host:port with a numeric port", nil
		}
	case "cidr":
		if _, _, err := net.ParseCIDR(v); err != nil {
			return "a CIDR such as 10.88.0.0/16", nil
		}
	case "duration":
		if d, err := time.ParseDuration(v); err != nil || d < 0 {
			return "a duration such as 1m or 30s", nil
		}
	case "mirror":
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return "a URL such as http://127.0.0.1:5000 (scheme and host only)", nil
		}
	case "annotation":
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return "key=value", nil
		}
	case "ifname":
		// IFNAMSIZ less the terminating NUL; no separators the kernel refuses.
		if len(v) > 15 || strings.ContainsAny(v, "/: \t\n") {
			return "an interface name of at most 15 characters without '/', ':' or spaces", nil
		}
	default:
		return "", fmt.Errorf("unknown check %q", name)
	}
	return "", nil
}

// isDNSLabel: RFC 1123 label, what a RuntimeClass handler must be.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

func sortedNames[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// alternatives formats ["a","b","c"] as "a, b or c".
func alternatives(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
