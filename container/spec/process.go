package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/moby/sys/user"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultPath is given to containers whose image sets no PATH, as
// containerd and Docker do.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Args merges the CRI command and args with the image's entrypoint and cmd
// the way the kubelet expects (the same rules as Kubernetes' command/args
// over Docker's ENTRYPOINT/CMD): a CRI command replaces the entrypoint and
// drops the image's cmd; CRI args replace the image's cmd.
func Args(c *runtimeapi.ContainerConfig, img ImageConfig) []string {
	if len(c.GetCommand()) > 0 {
		return append(append([]string{}, c.GetCommand()...), c.GetArgs()...)
	}
	args := append([]string{}, img.Entrypoint...)
	if len(c.GetArgs()) > 0 {
		return append(args, c.GetArgs()...)
	}
	return append(args, img.Cmd...)
}

// Env merges environments: image's first, then the CRI's, a later value of
// a variable replacing an earlier one in place.
func Env(hostname string, img ImageConfig, kvs []*runtimeapi.KeyValue) []string {
	var env []string
	index := map[string]int{}
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			env[i] = kv
			return
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	if hostname != "" {
		set("HOSTNAME=" + hostname)
	}
	for _, kv := range img.Env {
		set(kv)
	}
	if _, ok := index["PATH"]; !ok {
		set(DefaultPath)
	}
	for _, kv := range kvs {
		if kv.GetKey() == "" {
			continue
		}
		set(kv.GetKey() + "=" + string(kv.GetValue()))
	}
	return env
}

func (b *builder) process(s *specs.Spec) error {
	c := b.in.Config
	args := Args(c, b.in.Image)
	if len(args) == 0 {
		return invalid("command", "no command given and the image has no entrypoint or cmd")
	}
	for i, kv := range c.GetEnvs() {
		if strings.Contains(kv.GetKey(), "=") || strings.ContainsRune(kv.GetKey(), 0) {
			return invalid(fmt.Sprintf("envs[%d].key", i), "invalid variable name %q", kv.GetKey())
		}
		// Values are bytes since cri-api v0.37; a NUL would cut the
		// variable short at execve.
		if bytes.IndexByte(kv.GetValue(), 0) >= 0 {
			return invalid(fmt.Sprintf("envs[%d].value", i), "value of %s holds a NUL byte", kv.GetKey())
		}
	}
	cwd := c.GetWorkingDir()
	if cwd == "" {
		cwd = b.in.Image.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	if !strings.HasPrefix(cwd, "/") {
		return invalid("working_dir", "%q is not absolute", cwd)
	}
	s.Process.Args = args
	s.Process.Cwd = cwd
	hostname := b.in.Pod.Config.GetHostname()
	if b.podNamespaceMode(func(o *runtimeapi.NamespaceOption) runtimeapi.NamespaceMode { return o.GetNetwork() }) == runtimeapi.NamespaceMode_NODE {
		hostname, _ = os.Hostname()
	}
	s.Process.Env = Env(hostname, b.in.Image, c.GetEnvs())
	return nil
}

// user resolves the process's uid, gid and groups, in the precedence the
// kubelet expects: run_as_username, else run_as_user, else the image's
// USER; run_as_group overrides the primary group.
func (b *builder) user(s *specs.Spec) error {
	// A group alone would pair with the image's user, which the caller
	// never chose: containerd and CRI-O refuse it too.
	if b.sc.GetRunAsGroup() != nil && b.sc.GetRunAsUser() == nil && b.sc.GetRunAsUsername() == "" {
		return invalid("linux.security_context.run_as_group", "set without run_as_user or run_as_username")
	}
	passwd, err := b.in.Files.ReadFile("/etc/passwd")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read /etc/passwd of the image: %w", err)
	}
	group, err := b.in.Files.ReadFile("/etc/group")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read /etc/group of the image: %w", err)
	}
	field, userSpec := "image user", b.in.Image.User
	switch {
	case b.sc.GetRunAsUsername() != "":
		field, userSpec = "linux.security_context.run_as_username", b.sc.GetRunAsUsername()
	case b.sc.GetRunAsUser() != nil:
		field, userSpec = "linux.security_context.run_as_user", itoa(int(b.sc.GetRunAsUser().GetValue()))
		if v := b.sc.GetRunAsUser().GetValue(); v < 0 || v > 1<<31-1 {
			return invalid(field, "uid %d out of range", v)
		}
	}
	// The image's "user:group" form keeps its group; a CRI user never has one.
	name, grp, _ := strings.Cut(userSpec, ":")
	u, err := user.GetExecUser(name, nil, readerOrNil(passwd), readerOrNil(group))
	if err != nil {
		return invalid(field, "user %q: %w", name, err)
	}
	uid, gid := uint32(u.Uid), uint32(u.Gid)
	if grp != "" {
		g, err := user.GetExecUser(":"+grp, nil, nil, readerOrNil(group))
		if err != nil {
			return invalid(field, "group %q: %w", grp, err)
		}
		gid = uint32(g.Gid)
	}
	if rg := b.sc.GetRunAsGroup(); rg != nil {
		if rg.GetValue() < 0 || rg.GetValue() > 1<<31-1 {
			return invalid("linux.security_context.run_as_group", "gid %d out of range", rg.GetValue())
		}
		gid = uint32(rg.GetValue())
	}
	groups := []uint32{gid}
	if b.sc.GetSupplementalGroupsPolicy() != runtimeapi.SupplementalGroupsPolicy_Strict {
		member, err := memberGroups(group, uid, passwd)
		if err != nil {
			return invalid(field, "groups of user %q: %w", name, err)
		}
		groups = append(groups, member...)
	}
	for _, list := range [][]int64{b.psc.GetSupplementalGroups(), b.sc.GetSupplementalGroups()} {
		for _, g := range list {
			if g < 0 || g > 1<<31-1 {
				return invalid("linux.security_context.supplemental_groups", "gid %d out of range", g)
			}
			groups = append(groups, uint32(g))
		}
	}
	s.Process.User = specs.User{UID: uid, GID: gid, AdditionalGids: dedup(groups)}
	if u.Home != "" && !hasEnv(s.Process.Env, "HOME") {
		s.Process.Env = append(s.Process.Env, "HOME="+u.Home)
	}
	return nil
}

// memberGroups lists the gids of the /etc/group entries that name the
// user (found by uid in passwd) as a member.
func memberGroups(group []byte, uid uint32, passwd []byte) ([]uint32, error) {
	if group == nil || passwd == nil {
		return nil, nil
	}
	users, err := user.ParsePasswdFilter(bytes.NewReader(passwd), func(u user.User) bool { return u.Uid == int(uid) })
	if err != nil || len(users) == 0 {
		return nil, nil //nolint:nilerr // a uid without a passwd entry has no named groups
	}
	name := users[0].Name
	gs, err := user.ParseGroupFilter(bytes.NewReader(group), func(g user.Group) bool {
		for _, m := range g.List {
			if m == name {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	out := make([]uint32, 0, len(gs))
	for _, g := range gs {
		out = append(out, uint32(g.Gid))
	}
	return out, nil
}

func readerOrNil(b []byte) io.Reader {
	if b == nil {
		return nil
	}
	return bytes.NewReader(b)
}

func dedup(in []uint32) []uint32 {
	seen := map[uint32]bool{}
	out := in[:0]
	for _, v := range in {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	// The primary group stays first; the rest is sorted for stable output.
	if len(out) > 2 {
		rest := out[1:]
		sort.Slice(rest, func(i, j int) bool { return rest[i] < rest[j] })
	}
	return out
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}
