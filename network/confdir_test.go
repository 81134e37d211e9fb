package network

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const bridgeConflist = `{"cniVersion":"1.0.0","name":"n1","plugins":[{"type":"bridge","bridge":"b0","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}]}`

func TestLoadConfFile(t *testing.T) {
	tests := []struct {
		name, file, body string
		wantErr          string
		wantPlugins      []string
	}{
		{name: "conflist", file: "a.conflist", body: bridgeConflist, wantPlugins: []string{"bridge"}},
		{name: "single conf", file: "a.conf", body: `{"cniVersion":"1.0.0","name":"n2","type":"ptp"}`, wantPlugins: []string{"ptp"}},
		{name: "json conf", file: "a.json", body: `{"cniVersion":"0.4.0","name":"n3","type":"bridge"}`, wantPlugins: []string{"bridge"}},
		{name: "broken json", file: "a.conflist", body: `{"name":`, wantErr: "a.conflist"},
		{name: "list without plugins", file: "a.conflist", body: `{"cniVersion":"1.0.0","name":"n","plugins":[]}`, wantErr: "no plugins"},
		{name: "conf without type", file: "a.conf", body: `{"cniVersion":"1.0.0","name":"n"}`, wantErr: "missing 'type'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), tt.file)
			if err := os.WriteFile(p, []byte(tt.body), 0o644); err != nil {
				t.Fatal(err)
			}
			list, err := loadConfFile(p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range list.Plugins {
				got = append(got, p.Network.Type)
			}
			if strings.Join(got, ",") != strings.Join(tt.wantPlugins, ",") {
				t.Fatalf("plugins = %v, want %v", got, tt.wantPlugins)
			}
		})
	}
}

func TestConfFilesOrderAndFilter(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"20-b.conf", "10-a.conflist", "99-c.json", "05-x.bak", ".tmp-01.conflist", "00-dir.conf/"} {
		p := filepath.Join(dir, f)
		var err error
		if strings.HasSuffix(f, "/") {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, []byte("{}"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	files, err := confFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if got := strings.Join(names, " "); got != "10-a.conflist 20-b.conf 99-c.json" {
		t.Fatalf("confFiles = %s", got)
	}
	if files, err := confFiles(filepath.Join(dir, "missing")); err != nil || len(files) != 0 {
		t.Fatalf("missing dir: %v, %v", files, err)
	}
}

func TestDefaultNetwork(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	path, written, err := WriteDefault(dir, DefaultNetwork{Bridge: "bx0", Subnet: "10.77.0.0/16", DataDir: "/tmp/x"})
	if err != nil || !written {
		t.Fatalf("WriteDefault = %v, %v", written, err)
	}
	list, err := loadConfFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	if got := strings.Join(types, ","); got != "bridge,portmap,loopback,firewall" {
		t.Fatalf("plugins = %s", got)
	}
	body := string(list.Bytes)
	for _, want := range []string{`"bx0"`, `"10.77.0.0/16"`, `"isGateway": true`, `"ipMasq": true`, `"host-local"`, `"/tmp/x"`} {
		if !strings.Contains(body, want) {
			t.Errorf("default conflist lacks %s:\n%s", want, body)
		}
	}
	// An existing config is never overwritten.
	if err := os.WriteFile(filepath.Join(dir, "05-mine.conflist"), []byte(bridgeConflist), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if _, written, err := WriteDefault(dir, DefaultNetwork{}); err != nil || written {
		t.Fatalf("WriteDefault over an existing config: written %v, %v", written, err)
	}
	if _, err := (DefaultNetwork{Subnet: "nonsense"}).Conflist(); err == nil {
		t.Fatal("bad subnet accepted")
	}
}
