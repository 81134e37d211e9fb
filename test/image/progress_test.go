package image_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// A pull slowed down by a throttling proxy is visible while it runs: in
// berth images pulls, in the metrics and in a log line within a second of the
// first byte, then every 5 s.
func TestPullProgressVisible(t *testing.T) {
	reg := registry(t)
	p := newProxy(t, reg)
	// 3 downloads at once at 4 MB/s each: the ~100 MiB image takes ~9 s.
	p.set(func(p *proxy) { p.rate = 4 << 20 })
	metrics := framework.FreeTCPAddr(t)
	d := framework.StartDaemon(t, framework.WithArgs("--metrics-address", metrics, "--log-level", "info"))
	ref := p.Host + "/berth-test/big:latest"

	done := make(chan error, 1)
	go func() {
		_, err := d.Image.PullImage(framework.Ctx(t), &runtimeapi.PullImageRequest{Image: spec(ref)})
		done <- err
	}()

	// While it runs: the listing names it with its progress, the gauge
	// counts it.
	listed, inFlight := false, false
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ref) + `\s+(\d)/5\s+(\S+)\s+(\S+)\s+(\S+)/s\s+`)
	var pullErr error
wait:
	for {
		select {
		case pullErr = <-done:
			break wait
		case <-time.After(300 * time.Millisecond):
		}
		out, err := exec.Command(framework.Binary(t), "images", "pulls", "--address", d.Socket).CombinedOutput()
		if err != nil {
			t.Fatalf("berth images pulls: %v\n%s", err, out)
		}
		if m := row.FindStringSubmatch(string(out)); m != nil && m[2] != "0B" && m[3] != "0B" {
			if !listed {
				t.Logf("berth images pulls:\n%s", out)
			}
			listed = true
		}
		if v, ok := metric(t, metrics, "berth_image_pulls_in_flight"); ok && v == 1 {
			inFlight = true
		}
	}
	if pullErr != nil {
		t.Fatal(pullErr)
	}
	if !listed {
		t.Error("berth images pulls never listed the pull with bytes done")
	}
	if !inFlight {
		t.Error("berth_image_pulls_in_flight was never 1 during the pull")
	}
	if v, _ := metric(t, metrics, "berth_image_pulls_in_flight"); v != 0 {
		t.Errorf("berth_image_pulls_in_flight %v after the pull", v)
	}
	if v, _ := metric(t, metrics, `berth_image_pull_duration_seconds_count{outcome="success"}`); v != 1 {
		t.Errorf("pull duration count (success) %v, want 1", v)
	}
	if v, _ := metric(t, metrics, "berth_image_pull_bytes_total"); v < 100<<20 {
		t.Errorf("berth_image_pull_bytes_total %v, want the image's ~100 MiB", v)
	}
	if out, err := exec.Command(framework.Binary(t), "images", "pulls", "--address", d.Socket).CombinedOutput(); err != nil || strings.Contains(string(out), ref) {
		t.Errorf("berth images pulls after the pull: %v\n%s", err, out)
	}

	// The log: one line within a second of the first byte, then every 5 s,
	// with the bytes growing. Bounds are loose (the machine is shared);
	// the figures are logged.
	p.mu.Lock()
	first := p.first
	p.mu.Unlock()
	lines := progressLines(t, d.LogPath, ref)
	if len(lines) < 2 {
		t.Fatalf("%d progress lines for a ~9 s pull, want at least 2", len(lines))
	}
	prev := lines[0]
	t.Logf("first progress line %s after the first byte: %s", lines[0].at.Sub(first).Round(time.Millisecond), lines[0].text)
	if d := lines[0].at.Sub(first); d < 0 || d > 2500*time.Millisecond {
		t.Errorf("first progress line %s after the first byte, want ~1 s", d)
	}
	for _, l := range lines[1:] {
		gap := l.at.Sub(prev.at)
		t.Logf("+%s: %s", gap.Round(time.Millisecond), l.text)
		if gap < 4*time.Second || gap > 7*time.Second {
			t.Errorf("progress lines %s apart, want ~5 s", gap)
		}
		if l.bytes <= prev.bytes {
			t.Errorf("bytes went from %d to %d", prev.bytes, l.bytes)
		}
		prev = l
	}
}

type progressLine struct {
	at    time.Time
	bytes int64
	text  string
}

func progressLines(t *testing.T, logPath, ref string) []progressLine {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	timeRe := regexp.MustCompile(`\btime=(\S+)`)
	bytesRe := regexp.MustCompile(`\bbytes=(\d+)`)
	var out []progressLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="pulling image"`) || !strings.Contains(line, "ref="+ref) {
			continue
		}
		tm, bm := timeRe.FindStringSubmatch(line), bytesRe.FindStringSubmatch(line)
		if tm == nil || bm == nil {
			t.Fatalf("progress line without time or bytes: %s", line)
		}
		at, err := time.Parse(time.RFC3339Nano, tm[1])
		if err != nil {
			t.Fatalf("progress line time: %v", err)
		}
		n, _ := strconv.ParseInt(bm[1], 10, 64)
		out = append(out, progressLine{at: at, bytes: n, text: line})
	}
	return out
}

// metric reads one sample (name with its labels, as exposed) from the
// daemon's /metrics.
func metric(t *testing.T, addr, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
