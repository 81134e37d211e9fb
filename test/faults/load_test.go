package faults_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

const (
	loadClients = 50
	// loadSettleTimeout bounds the wait for the daemon to give back what the
	// load took; a leak never settles, so the wait ends in a failure.
	loadSettleTimeout = 4 * time.Minute

	// The margins of "back to idle". Goroutines and fds: a scrape's own
	// connection and a timer or two may be in flight; a leak of one per
	// pod or per call would be hundreds. The live heap (what the last GC
	// found live): berth's stats keep the last CPU and disk sample of a
	// removed container or pod for 10 minutes (stats.forgetAfter), a few
	// hundred bytes each, and the CRI metrics gain series for the codes
	// the load made; 4 MiB holds that for a 5-minute load, where a leak of
	// a few KiB per pod cycle (thousands of them) or of a few hundred
	// bytes per call (hundreds of thousands) would not fit. RSS is only
	// reported: Go returns freed memory to the kernel lazily.
	loadGoroutineMargin = 10
	loadFDMargin        = 5
	loadHeapMargin      = 4 << 20
)

// TestLoad runs 50 clients with a connection each against one daemon for
// $BERTH_LOAD_DURATION (default 45s), each cycling pods (at most
// $BERTH_LOAD_PODS, default 10, live at once) and listing, reading status
// and stats and making bad calls in between. Every call must end as
// expected. Once everything is removed, the daemon's goroutines, fds and
// live heap must be back to what they were idle, and nothing of the pods
// may be left on the host. The full run:
//
//	BERTH_LOAD_DURATION=5m hack/registry -- go test -count=1 -timeout 20m ./test/faults/ -run TestLoad -v
func TestLoad(t *testing.T) {
	framework.RequireRoot(t)
	duration := loadEnvDuration(t, "BERTH_LOAD_DURATION", 45*time.Second)
	pods := loadEnvInt(t, "BERTH_LOAD_PODS", 10)

	n := cnitest.NewNet(t)
	parent := "/berth-load-" + framework.RandHex(4)
	t.Cleanup(func() { framework.RemoveCgroup(parent) })
	metrics := framework.FreeTCPAddr(t)
	// Info, not the framework's debug: a debug line per call of 50
	// clients would make the log the load. A -race build of berth and of
	// the monitors and pauses it starts (they inherit its environment)
	// writes each report to a file in races; other builds ignore GORACE.
	races := t.TempDir()
	d := framework.StartDaemon(t, framework.WithArgs("--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.BinDir,
		"--metrics-address", metrics, "--log-level", "info"), framework.WithEnv("GORACE=log_path="+races+"/race"))
	env := &loadEnv{
		socket: d.Socket,
		image:  framework.TestRegistry(t) + "/library/busybox:latest",
		parent: parent,
		logDir: t.TempDir(),
		rec:    newLoadRecord(),
		slots:  make(chan struct{}, pods),
	}
	if _, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: env.image}}); err != nil {
		t.Fatalf("pull %s: %v", env.image, err)
	}
	sc := newLoadScraper(metrics, d.PID)

	// Idle is measured after one of everything, so that what berth sets
	// up once (caches, pools, lazily built clients) counts as idle.
	warm, err := newLoadClient(env, -1)
	if err != nil {
		t.Fatal(err)
	}
	warm.podCycle()
	warm.conn.Close()
	if f := env.rec.failures(); len(f) > 0 {
		t.Fatalf("warm-up:\n%s", strings.Join(f, "\n"))
	}
	scope := d.Scope()
	scope.Dirs = append(scope.Dirs, n.DataDir)
	scope.CgroupParents, scope.Bridges, scope.Networks = []string{parent}, []string{n.Bridge}, []string{n.Name}
	before := framework.SnapshotHost(t, scope)
	idle := loadSettle(t, d, sc, loadUsage{}, time.Minute)
	t.Logf("idle: %s", idle)

	stop := make(chan struct{})
	peak := sc.peak(2*time.Second, stop)
	start := time.Now()
	clients := loadRunClients(t, env, loadClients, start.Add(duration))
	took := time.Since(start)
	close(stop)
	loadCloseClients(clients)
	calls := env.rec.calls()
	t.Logf("%d clients, %s (%s with the last pod cycles finished): %d calls (%.0f/s), %d pod cycles (%.1f/s), at most %d pods at once",
		loadClients, duration, took.Round(time.Second), calls, float64(calls)/took.Seconds(),
		env.cycles.Load(), float64(env.cycles.Load())/took.Seconds(), pods)
	t.Logf("per RPC:\n%s", env.rec.summary())
	for _, f := range env.rec.failures() {
		t.Errorf("unexpected: %s", f)
	}

	loadCheckNothingLeft(t, d, before)
	loadCheckNoRace(t, races)
	after := loadSettle(t, d, sc, idle, loadSettleTimeout)
	t.Logf("idle %s\npeak %s\nafter %s", idle, peak(), after)
	if after.Goroutines > idle.Goroutines+loadGoroutineMargin {
		t.Errorf("goroutines: %.0f after the load, %.0f idle (margin %d)", after.Goroutines, idle.Goroutines, loadGoroutineMargin)
	}
	if after.FDs > idle.FDs+loadFDMargin {
		t.Errorf("open fds: %.0f after the load, %.0f idle (margin %d)", after.FDs, idle.FDs, loadFDMargin)
	}
	if after.LiveHeap > idle.LiveHeap+loadHeapMargin {
		t.Errorf("live heap: %.2f MiB after the load, %.2f MiB idle (margin %d MiB)",
			after.LiveHeap/(1<<20), idle.LiveHeap/(1<<20), loadHeapMargin>>20)
	}
}

// loadRunClients connects n clients, runs them until the deadline and returns
// them still connected: a connection is part of what the daemon holds.
func loadRunClients(t *testing.T, env *loadEnv, n int, until time.Time) []*loadClient {
	t.Helper()
	clients := make([]*loadClient, n)
	for i := range clients {
		c, err := newLoadClient(env, i)
		if err != nil {
			loadCloseClients(clients[:i])
			t.Fatal(err)
		}
		clients[i] = c
	}
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { c.run(until) })
	}
	wg.Wait()
	return clients
}

func loadCloseClients(clients []*loadClient) {
	for _, c := range clients {
		c.conn.Close()
	}
}

// loadSettle waits until the daemon has run a GC since the load ended and its
// goroutines and fds are within the margins of target (any zero target is
// met at once), and returns its usage then. A daemon idles with next to
// no allocation, so a GC can be an idle two minutes away; cheap list calls
// (what a kubelet's relist makes) bring the next one in seconds.
func loadSettle(t *testing.T, d *framework.Daemon, sc *loadScraper, target loadUsage, timeout time.Duration) loadUsage {
	t.Helper()
	first, err := sc.usage()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	var last loadUsage
	for {
		for range 200 {
			ctx, cancel := context.WithTimeout(context.Background(), loadCallTimeout)
			_, err := d.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
			cancel()
			if err != nil {
				t.Fatalf("ListImages while settling: %v", err)
			}
		}
		time.Sleep(time.Second)
		if last, err = sc.usage(); err != nil {
			t.Fatal(err)
		}
		gcDone := last.GCs >= first.GCs+2 // the first may have started before
		if gcDone && (target.Goroutines == 0 || last.Goroutines <= target.Goroutines+loadGoroutineMargin) &&
			(target.FDs == 0 || last.FDs <= target.FDs+loadFDMargin) {
			return last
		}
		if time.Now().After(deadline) {
			t.Logf("not settled after %s: %s, %.0f GCs since", timeout, last, last.GCs-first.GCs)
			return last
		}
	}
}

// loadCheckNothingLeft checks that the daemon lists no pod or container and
// that none of their processes, mounts, netns pins, files, IP leases,
// veths or cgroups is left on the host.
func loadCheckNothingLeft(t *testing.T, d *framework.Daemon, before framework.HostState) {
	t.Helper()
	ctx := framework.Ctx(t)
	if pods, err := d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil || len(pods.Items) > 0 {
		t.Errorf("pods left after the load: %v %v", pods.GetItems(), err)
	}
	if ctrs, err := d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil || len(ctrs.Containers) > 0 {
		t.Errorf("containers left after the load: %v %v", ctrs.GetContainers(), err)
	}
	framework.CheckHost(t, before)
}

// loadCheckNoRace fails the test on every race report in dir.
func loadCheckNoRace(t *testing.T, dir string) {
	t.Helper()
	reports, _ := filepath.Glob(filepath.Join(dir, "race.*"))
	for _, r := range reports {
		b, err := os.ReadFile(r)
		t.Errorf("data race reported (%s): %s %v", filepath.Base(r), b, err)
	}
}

func loadEnvDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("$%s=%q: want a duration such as 5m", name, v)
	}
	return d
}

func loadEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	i, err := strconv.Atoi(v)
	if err != nil || i <= 0 {
		t.Fatalf("$%s=%q: want a positive number", name, v)
	}
	return i
}
