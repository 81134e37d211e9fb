package sandbox_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestPlainPodsStayInHostUserNamespace guards the branch in RunPodSandbox
// that gives a pod its own user namespace: a pod that does not ask for one
// (no options at all, whose zero mode is POD, or mode NODE) must get
// berth's user namespace and the netns berth made and pinned before
// pause, not one that pause made. A pod that does ask (mode POD with
// mappings) gets its own, and its netns is still the pinned one.
func TestPlainPodsStayInHostUserNamespace(t *testing.T) {
	e := newEnv(t)
	hostUser := nsInode("/proc/self/ns/user")
	mapping := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 1 << 20, Length: 65536}}
	cases := []struct {
		name    string
		userns  *runtimeapi.UserNamespace
		ownUser bool
	}{
		{"no-userns-options", nil, false},
		{"userns-node", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, false},
		{"userns-pod", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.ownUser && !userNamespacesSupported(t, e) {
				t.Skip("berth reports no user namespace support on this machine")
			}
			cfg := e.config(c.name)
			if c.userns != nil {
				cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
					NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: c.userns},
				}
			}
			id := e.run(cfg)
			_, info := e.status(id)
			if info.Pid <= 0 {
				t.Fatalf("verbose status has no pause pid: %+v", info)
			}
			pauseUser := nsInode(procNS(info.Pid, "user"))
			if inHost := pauseUser == hostUser; inHost == c.ownUser {
				t.Errorf("pause %d in user namespace %s, host's is %s: want own user namespace = %v",
					info.Pid, pauseUser, hostUser, c.ownUser)
			}
			if uidMap := readUIDMap(t, info.Pid); c.ownUser != (uidMap != "0 0 4294967295") {
				t.Errorf("pause %d uid_map %q (own user namespace wanted: %v)", info.Pid, uidMap, c.ownUser)
			}
			pinDir := filepath.Join(e.d.State, "netns")
			if filepath.Dir(info.NetNS) != pinDir {
				t.Fatalf("netns %q is not a pin under %s", info.NetNS, pinDir)
			}
			if pin, pauseNet := nsInode(info.NetNS), nsInode(procNS(info.Pid, "net")); pin != pauseNet {
				t.Errorf("pause %d is in netns %s, the pin %s is %s", info.Pid, pauseNet, info.NetNS, pin)
			}
			if hostNet := nsInode("/proc/self/ns/net"); nsInode(info.NetNS) == hostNet {
				t.Errorf("the pin %s is the host's netns", info.NetNS)
			}
			e.stop(id)
			e.remove(id)
		})
	}
}

func procNS(pid int, ns string) string {
	return filepath.Join("/proc", strconv.Itoa(pid), "ns", ns)
}

// readUIDMap is pause's uid_map with its columns single-spaced; the host
// user namespace maps the whole range onto itself.
func readUIDMap(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "uid_map"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

func userNamespacesSupported(t *testing.T, e *env) bool {
	t.Helper()
	st, err := e.d.Runtime.Status(framework.Ctx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.RuntimeHandlers {
		if h.GetName() == "" {
			return h.GetFeatures().GetUserNamespaces()
		}
	}
	return false
}
