package container_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// TestCheckpointPod checkpoints a pod of two counting containers
// (CheckpointPod, cri-api v0.37) and restores it into a new pod
// (RestorePod): where CRIU works, both counters go on from where they
// were, in the new pod, and the checkpointed pod ran on meanwhile; bad
// requests are refused everywhere naming the problem, leaving nothing;
// where CRIU does not work, both calls answer as CheckpointContainer
// does and nothing is left.
func TestCheckpointPod(t *testing.T) {
	works := criuWorks(t)
	e := newEnv(t, framework.WithArgs("--pod-process", "podproc"))
	podCfg := e.podConfig("ckpt-pod")
	pod := e.runPod(podCfg)
	a := e.run(pod, podCfg, e.ctrConfig("a", counter))
	b := e.run(pod, podCfg, e.ctrConfig("b", counter))
	done := e.run(pod, podCfg, e.ctrConfig("done", "true"))
	e.waitExit(done, 20*time.Second)
	otherCfg := e.podConfig("other")
	other := e.runPod(otherCfg)
	stranger := e.run(other, otherCfg, e.ctrConfig("stranger", "sleep 1000"))
	waitLog(t, e.status(a).LogPath, "tick 5")
	waitLog(t, e.status(b).LogPath, "tick 5")

	out := t.TempDir()
	full := t.TempDir()
	writeArchive(t, filepath.Join(full, "x.tar"), fakeCheckpoint(e.image))
	checkpoint := func(pod, dir string, opts map[string]string, ids ...string) error {
		_, err := e.d.Runtime.CheckpointPod(framework.Ctx(t), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: dir, ContainerIds: ids, Options: opts})
		return err
	}
	for _, tc := range []struct {
		name, pod, dir string
		opts           map[string]string
		ids            []string
		code           codes.Code
		want           string
	}{
		{"unknown pod", "nope", out, nil, []string{a}, codes.NotFound, "nope"},
		{"no output path", pod, "", nil, []string{a}, codes.InvalidArgument, "output_path: required"},
		{"missing output path", pod, filepath.Join(out, "missing"), nil, []string{a}, codes.InvalidArgument, "not a directory that exists"},
		{"output path not empty", pod, full, nil, []string{a}, codes.InvalidArgument, "not empty"},
		{"no containers", pod, out, nil, nil, codes.InvalidArgument, "container_ids: empty"},
		{"a container twice", pod, out, nil, []string{a, b, a}, codes.InvalidArgument, "named twice"},
		{"another pod's container", pod, out, nil, []string{a, stranger}, codes.InvalidArgument, "of pod sandbox " + other},
		{"an exited container", pod, out, nil, []string{a, done}, codes.FailedPrecondition, "not running"},
		{"options", pod, out, map[string]string{"tcp-established": "true"}, []string{a}, codes.InvalidArgument, "options"},
	} {
		if err := checkpoint(tc.pod, tc.dir, tc.opts, tc.ids...); status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckpointPod, %s: %v, want %s naming %q", tc.name, err, tc.code, tc.want)
		}
	}
	emptyDir(t, out)

	newPodCfg := e.podConfig("restored-pod")
	restore := func(dir string, cfgs ...*runtimeapi.ContainerConfig) (*runtimeapi.RestorePodResponse, error) {
		return e.d.Runtime.RestorePod(framework.Ctx(t), &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: newPodCfg, ContainerConfigs: cfgs})
	}
	pods := podIDs(t, e)
	if !works {
		if err := checkpoint(pod, out, nil, a, b); status.Code(err) != codes.Unknown || status.Convert(err).Message() != "checkpoint/restore support not available" {
			t.Fatalf("CheckpointPod without a working CRIU: %v, want Unknown %q", err, "checkpoint/restore support not available")
		}
		emptyDir(t, out)
		// Refused before the pod is made: no pod, and no CNI ADD.
		fake := writeFakePodCheckpoint(t, e, "a", "b")
		added := lastReserved(t, e)
		_, err := restore(fake, e.ctrConfig("a", counter), e.ctrConfig("b", counter))
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "checkpoint/restore support not available" {
			t.Errorf("RestorePod without a working CRIU: %v, want Unknown %q", err, "checkpoint/restore support not available")
		}
		if got := podIDs(t, e); !slices.Equal(got, pods) {
			t.Errorf("a failed RestorePod left pods: %v, before %v", got, pods)
		}
		if got := lastReserved(t, e); got != added {
			t.Errorf("a RestorePod refused for want of CRIU ran a CNI ADD: host-local last gave %s, before %s", got, added)
		}
		return
	}

	// The old pod runs on until the end: its network namespace's inode
	// number, freed, could come back as the new pod's.
	_, pausePid := e.podStatus(pod)
	oldNetNS := nsOf(t, pausePid, "net")
	last := map[string]int{}
	for name, id := range map[string]string{"a": a, "b": b} {
		seen := ticks(logText(t, e.status(id).LogPath))
		last[name] = seen[len(seen)-1]
	}
	start := time.Now()
	if err := checkpoint(pod, out, nil, a, b); err != nil {
		t.Fatalf("CheckpointPod: %v", err)
	}
	t.Logf("CheckpointPod of 2 containers took %s", time.Since(start))
	for name, id := range map[string]string{"a": a, "b": b} {
		checkArchive(t, filepath.Join(out, id+".tar"), id, name)
		// Thawed: the checkpointed pod runs on.
		seen := ticks(logText(t, e.status(id).LogPath))
		waitLog(t, e.status(id).LogPath, "tick "+strconv.Itoa(seen[len(seen)-1]+3))
	}
	if _, err := os.Stat(filepath.Join(out, "pod.json")); err != nil {
		t.Errorf("pod.json: %v", err)
	}

	// A restore that does not match the checkpoint makes nothing.
	pods = podIDs(t, e)
	if _, err := restore(out, e.ctrConfig("a", counter)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1 configs for the checkpoint's 2") {
		t.Errorf("RestorePod of one of two containers: %v, want InvalidArgument", err)
	}
	if got := podIDs(t, e); !slices.Equal(got, pods) {
		t.Errorf("a refused RestorePod left pods: %v, before %v", got, pods)
	}

	start = time.Now()
	resp, err := restore(out, e.ctrConfig("b", "echo not restored"), e.ctrConfig("a", "echo not restored"))
	if err != nil {
		t.Fatalf("RestorePod: %v", err)
	}
	t.Logf("RestorePod took %s", time.Since(start))
	if len(resp.RestoredContainers) != 2 || resp.RestoredContainers[0].Name != "b" || resp.RestoredContainers[1].Name != "a" {
		t.Fatalf("RestorePod answered %v, want b and a", resp)
	}
	for _, rc := range resp.RestoredContainers {
		if st := e.status(rc.ContainerId); st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Metadata.Name != rc.Name {
			t.Fatalf("restored container %s before its start: %v", rc.Name, st)
		}
	}
	for _, rc := range resp.RestoredContainers {
		start = time.Now()
		e.start(rc.ContainerId)
		t.Logf("StartContainer of restored %s took %s", rc.Name, time.Since(start))
	}
	for _, rc := range resp.RestoredContainers {
		checkRestored(t, e, resp.PodSandboxId, rc.ContainerId, oldNetNS, last[rc.Name])
	}
	e.removePod(resp.PodSandboxId)
	e.removePod(pod)
}

// removePod stops and removes a pod with its containers.
func (e *env) removePod(id string) {
	e.t.Helper()
	ctx := framework.Ctx(e.t)
	if _, err := e.d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		e.t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := e.d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		e.t.Fatalf("RemovePodSandbox: %v", err)
	}
}

// writeFakePodCheckpoint writes a pod checkpoint of containers names
// that CRIU never wrote.
func writeFakePodCheckpoint(t *testing.T, e *env, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	var entries []string
	for _, n := range names {
		writeArchive(t, filepath.Join(dir, n+".tar"), fakeCheckpoint(e.image))
		entries = append(entries, `{"name":"`+n+`","id":"`+n+`","archive":"`+n+`.tar","image":"`+e.image+`"}`)
	}
	manifest := `{"version":1,"podId":"gone","containers":[` + strings.Join(entries, ",") + `]}`
	if err := os.WriteFile(filepath.Join(dir, "pod.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// emptyDir checks that dir holds nothing.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("%s holds %v (%v), want nothing", dir, entries, err)
	}
}

// lastReserved is the address host-local last gave in e's network: a
// CNI ADD moves it on, its DEL leaves it.
func lastReserved(t *testing.T, e *env) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.net.DataDir, e.net.Name, "last_reserved_ip.0"))
	if err != nil {
		t.Fatalf("host-local's last reserved address: %v", err)
	}
	return strings.TrimSpace(string(data))
}

// podIDs are the daemon's pods, sorted.
func podIDs(t *testing.T, e *env) []string {
	t.Helper()
	resp, err := e.d.Runtime.ListPodSandbox(framework.Ctx(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	var ids []string
	for _, p := range resp.Items {
		ids = append(ids, p.Id)
	}
	slices.Sort(ids)
	return ids
}

// The pod of TestCheckpointPodTCP: a server that takes one connection on
// the pod's loopback and logs what comes through it, and a client that
// connects once and writes a counter through that one connection every
// 100 ms, logging what it sent. busybox's nc -l serves one connection and
// exits when it ends, and the client's nc ends the client with it: a
// reconnect would need a new server, and so shows as a container that
// exited or a connection of another port. The server's stdin stays open
// (a pipe from sleep): at its end nc would half-close the connection.
const (
	tcpPort   = 7777
	tcpServer = `sleep 1000000 | nc -l -p 7777; echo "server: connection ended"`
	tcpClient = `i=0; while true; do echo "seq $i"; echo "sent $i" >&2; i=$((i+1)); sleep 0.1; done | nc 127.0.0.1 7777; echo "client: connection ended" >&2`
)

var seqRE = regexp.MustCompile(`seq (\d+)`)

// seqs are the counter values the server's log holds, in order.
func seqs(text string) []int {
	var out []int
	for _, m := range seqRE.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// checkSeqs checks that the server received an unbroken run of the
// counter: each value once, in order.
func checkSeqs(t *testing.T, what string, got []int) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("%s: the server received %v: not one stream of the counter", what, got)
		}
	}
}

// clientPorts are the local ports of the established IPv4 connections
// to 127.0.0.1:tcpPort in the network namespace of pid (the client's
// ends: the server's, of a socket listening on IPv6's any address, are
// in tcp6).
func clientPorts(t *testing.T, pid int) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", "tcp"))
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for _, l := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(l)
		// local_address rem_address st: 0100007F:A2C4 0100007F:1E61 01
		if len(f) < 4 || f[3] != "01" || f[2] != fmt.Sprintf("0100007F:%04X", tcpPort) {
			continue
		}
		p, _ := strconv.ParseUint(f[1][strings.IndexByte(f[1], ':')+1:], 16, 16)
		ports = append(ports, int(p))
	}
	return ports
}

// archiveEntry is the entry name of the archive at location.
func archiveEntry(t *testing.T, location, name string) []byte {
	t.Helper()
	f, err := os.Open(location)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s (%v)", location, name, err)
		}
		if h.Name == name {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("%s: %s: %v", location, name, err)
			}
			return data
		}
	}
}

var criuLogTime = regexp.MustCompile(`^\((\d+\.\d+)\) (.*)`)

// dumpTiming says how long CRIU's dump in the archive at location took,
// and where its longest wait was (CRIU's log lines carry the seconds
// since its start): in the emulated VM a dump takes seconds to tens of
// seconds, by the host's load.
func dumpTiming(t *testing.T, location string) string {
	t.Helper()
	var last, gap float64
	var after string
	for _, l := range strings.Split(string(archiveEntry(t, location, "dump.log")), "\n") {
		m := criuLogTime.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		if at-last > gap {
			gap, after = at-last, m[2]
		}
		last = at
	}
	return fmt.Sprintf("CRIU's dump took %.2fs, its longest step %.2fs before %q", last, gap, after)
}

// configDumpTCP reads config.dump's tcpEstablished in the archive at
// location.
func configDumpTCP(t *testing.T, location string) bool {
	t.Helper()
	var cfg struct {
		TCPEstablished bool `json:"tcpEstablished"`
	}
	if err := json.Unmarshal(archiveEntry(t, location, "config.dump"), &cfg); err != nil {
		t.Fatalf("%s: config.dump: %v", location, err)
	}
	return cfg.TCPEstablished
}

// waitServerPast waits until the server's log holds a value past n and
// returns its values.
func waitServerPast(t *testing.T, logPath string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := seqs(logText(t, logPath))
		if len(got) > 0 && got[len(got)-1] > n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server received nothing past %d in 20 s: %v\n%s", n, got, logText(t, logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCheckpointPodTCP checkpoints and restores a pod whose two
// containers hold a TCP connection to each other over the pod's
// loopback: CheckpointPod dumps it (CRIU's tcp-established, recorded in
// each archive's config.dump), RestorePod and StartContainer of each
// restore it, and the server goes on receiving the counter through the
// same connection in the new pod, its first end restored a second
// before the other. CheckpointContainer of the client alone is refused
// (no tcp-established for a container's checkpoint) and leaves the
// connection be. Where CRIU does not work, CheckpointPod is refused and
// the connection goes on.
func TestCheckpointPodTCP(t *testing.T) {
	works := criuWorks(t)
	e := newEnv(t, framework.WithArgs("--pod-process", "podproc"))
	podCfg := e.podConfig("tcp-pod")
	pod := e.runPod(podCfg)
	server := e.run(pod, podCfg, e.ctrConfig("server", tcpServer))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r := e.exec(server, 10, "netstat", "-ltn"); strings.Contains(string(r.Stdout), fmt.Sprintf(":%d ", tcpPort)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not listen on %d", tcpPort)
		}
	}
	client := e.run(pod, podCfg, e.ctrConfig("client", tcpClient))
	serverLog := e.status(server).LogPath
	got := waitServerPast(t, serverLog, 5)
	checkSeqs(t, "before the checkpoint", got)
	_, pausePid := e.podStatus(pod)
	ports := clientPorts(t, pausePid)
	if len(ports) != 1 {
		t.Fatalf("established connections to port %d in the pod: from ports %v, want one", tcpPort, ports)
	}
	t.Logf("the client's connection: 127.0.0.1:%d -> 127.0.0.1:%d", ports[0], tcpPort)

	out := t.TempDir()
	// The kubelet's runtime request timeout: in the emulated VM on a busy
	// host a dump has taken past the 30 s of framework.Ctx.
	slowCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	checkpoint := func() error {
		_, err := e.d.Runtime.CheckpointPod(slowCtx(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: []string{server, client}})
		return err
	}
	if !works {
		if err := checkpoint(); status.Code(err) != codes.Unknown || status.Convert(err).Message() != "checkpoint/restore support not available" {
			t.Fatalf("CheckpointPod without a working CRIU: %v, want Unknown %q", err, "checkpoint/restore support not available")
		}
		emptyDir(t, out)
		got = waitServerPast(t, serverLog, got[len(got)-1]+5)
		checkSeqs(t, "after the refused checkpoint", got)
		return
	}

	// A container's checkpoint does not dump connections: the client's
	// is refused, and its connection goes on.
	_, err := e.d.Runtime.CheckpointContainer(slowCtx(), &runtimeapi.CheckpointContainerRequest{ContainerId: client, Location: filepath.Join(t.TempDir(), "client.tar"), Timeout: 120})
	t.Logf("CheckpointContainer of the client: %v", err)
	if err == nil || !strings.Contains(err.Error(), "tcp-established") {
		t.Errorf("CheckpointContainer of a container holding an established connection: %v, want CRIU's refusal naming tcp-established", err)
	}
	got = waitServerPast(t, serverLog, got[len(got)-1]+5)
	checkSeqs(t, "after the container checkpoint", got)

	_, oldPause := e.podStatus(pod)
	oldNetNS := nsOf(t, oldPause, "net")
	before := seqs(logText(t, serverLog))
	last := before[len(before)-1]
	start := time.Now()
	if err := checkpoint(); err != nil {
		for name, id := range map[string]string{"server": server, "client": client} {
			st := e.status(id)
			t.Logf("%s after the failed checkpoint: %v\n%s", name, st.State, logText(t, st.LogPath))
		}
		t.Fatalf("CheckpointPod after %s: %v", time.Since(start), err)
	}
	t.Logf("CheckpointPod of a server and a client holding a connection took %s", time.Since(start))
	for name, id := range map[string]string{"server": server, "client": client} {
		if !configDumpTCP(t, filepath.Join(out, id+".tar")) {
			t.Errorf("archive of %s: config.dump does not say tcpEstablished", id)
		}
		t.Logf("%s: %s", name, dumpTiming(t, filepath.Join(out, id+".tar")))
	}
	// Thawed, the connection unbroken: the old pod goes on.
	got = waitServerPast(t, serverLog, last+5)
	checkSeqs(t, "the checkpointed pod after the checkpoint", got)

	newPodCfg := e.podConfig("tcp-restored")
	start = time.Now()
	resp, err := e.d.Runtime.RestorePod(slowCtx(), &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: newPodCfg,
		ContainerConfigs: []*runtimeapi.ContainerConfig{e.ctrConfig("server", "echo not restored"), e.ctrConfig("client", "echo not restored")}})
	if err != nil {
		t.Fatalf("RestorePod: %v", err)
	}
	t.Logf("RestorePod took %s", time.Since(start))
	ids := map[string]string{}
	for _, rc := range resp.RestoredContainers {
		ids[rc.Name] = rc.ContainerId
	}
	_, newPause := e.podStatus(resp.PodSandboxId)
	holdRule := func() bool {
		return strings.Contains(nsenter(t, newPause, "-n", "iptables", "-w", "-S", "OUTPUT"), "berth: pod restore in progress")
	}
	if !holdRule() {
		t.Errorf("the new pod's loopback resets are not held back before the restores")
	}
	// The server first, the client a second later, as a kubelet starts
	// them one by one: meanwhile the server's end of the connection has
	// no peer.
	for i, name := range []string{"server", "client"} {
		if i > 0 {
			time.Sleep(time.Second)
		}
		start = time.Now()
		if _, err := e.d.Runtime.StartContainer(slowCtx(), &runtimeapi.StartContainerRequest{ContainerId: ids[name]}); err != nil {
			t.Fatalf("StartContainer of restored %s: %v", name, err)
		}
		t.Logf("StartContainer of restored %s took %s", name, time.Since(start))
	}
	newLog := e.status(ids["server"]).LogPath
	got = waitServerPast(t, newLog, last+1)
	for deadline := time.Now().Add(20 * time.Second); len(got) < 20 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = seqs(logText(t, newLog))
	}
	t.Logf("the server received up to %d before the checkpoint; restored, it received %d values from %d to %d", last, len(got), got[0], got[len(got)-1])
	if len(got) < 20 || got[0] <= last {
		t.Fatalf("the restored server received %v: want the counter going on from above %d", got, last)
	}
	checkSeqs(t, "the restored pod", got)
	for _, name := range []string{"server", "client"} {
		st := e.status(ids[name])
		if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("restored %s: %v\n%s", name, st.State, logText(t, st.LogPath))
			continue
		}
		if text := logText(t, st.LogPath); strings.Contains(text, "connection ended") {
			t.Errorf("restored %s's log: %s", name, text)
		}
		pid := e.containerPid(ids[name])
		if got, want := nsOf(t, pid, "net"), nsOf(t, newPause, "net"); got != want || got == oldNetNS {
			t.Errorf("restored %s in netns %s, want the new pod's %s (the old pod's was %s)", name, got, want, oldNetNS)
		}
	}
	if got := clientPorts(t, newPause); len(got) != 1 || got[0] != ports[0] {
		t.Errorf("established connections to port %d in the new pod: from ports %v, want the one from %d (not a new one)", tcpPort, got, ports[0])
	}
	// The hold of the pod's loopback resets ended with the last restore.
	if holdRule() {
		t.Errorf("the new pod's loopback resets are still held back after the restores")
	}
	e.removePod(resp.PodSandboxId)
	e.removePod(pod)
}
