package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

var confExtensions = []string{".conf", ".conflist", ".json"}

// ErrNoConfig is the reason the network is not ready while the conf dir
// holds no network configuration.
var ErrNoConfig = errors.New("no network config found")

// confFiles lists the configuration files of dir in the order CNI
// runtimes agree on: by file name.
func confFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CNI conf dir: %w", err)
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if slices.Contains(confExtensions, filepath.Ext(e.Name())) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(files)
	return files, nil
}

// fingerprint identifies the state of the conf dir cheaply enough to be
// taken on every Status call: names, sizes and modification times of the
// configuration files. A config written in place keeps its name but
// changes its mtime or size, so it is seen too.
func fingerprint(files []string) string {
	var b strings.Builder
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "%s:gone;", f)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String()
}

// loadConfFile reads one configuration file as a list, whatever its kind.
// Only the first file counts: a broken first file is an error rather than
// a silent fall-through to another network.
func loadConfFile(file string) (*libcni.NetworkConfigList, error) {
	if filepath.Ext(file) == ".conflist" {
		list, err := libcni.NetworkConfFromFile(file)
		if err != nil {
			return nil, fmt.Errorf("load CNI config %s: %w", file, err)
		}
		return list, nil
	}
	conf, err := libcni.ConfFromFile(file)
	if err != nil {
		return nil, fmt.Errorf("load CNI config %s: %w", file, err)
	}
	list, err := libcni.ConfListFromConf(conf)
	if err != nil {
		return nil, fmt.Errorf("load CNI config %s: %w", file, err)
	}
	return list, nil
}
