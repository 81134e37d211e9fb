package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"
)

// berthSteps reads berth's log (text format) for the step times it logs
// with each pod it makes ready ("pod sandbox ready": netns, cni_add,
// pause) and stops ("pod sandbox stopped": pause, monitor, cni_del), for
// the pods in ids.
func berthSteps(path string, ids map[string]bool) (map[string]*Dist, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	keys := map[string]map[string]string{
		"pod sandbox ready":   {"netns": "netns", "cni_add": "cni_add", "pause": "pause"},
		"pod sandbox stopped": {"pause": "pause_stop", "monitor": "monitor_stop", "cni_del": "cni_del"},
	}
	samples := map[string][]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		attrs := logAttrs(sc.Text())
		want, ok := keys[attrs["msg"]]
		if !ok || !ids[attrs["pod"]] {
			continue
		}
		for k, name := range want {
			if d, err := time.ParseDuration(attrs[k]); err == nil {
				samples[name] = append(samples[name], ms(d))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]*Dist{}
	for name, v := range samples {
		out[name] = distPtr(v)
	}
	return out, nil
}

// logAttrs splits one slog text line into its key=value pairs (values may
// be quoted).
func logAttrs(line string) map[string]string {
	out := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			i := 1
			for i < len(rest) && (rest[i] != '"' || rest[i-1] == '\\') {
				i++
			}
			v = strings.ReplaceAll(rest[1:min(i, len(rest))], `\"`, `"`)
			rest = rest[min(i+1, len(rest)):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		out[k] = v
		line = rest
	}
	return out
}
