package spec

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// DefaultCDISpecDirs are where CDI spec files are looked for unless the
// config says otherwise: static specs, then those that drivers write at
// run time (a later directory's device wins over an earlier one's).
var DefaultCDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// CDIRegistry is the CDI of this node: the spec files of its spec
// directories, read with the CDI library.
//
// It rereads them when a create asks for a CDI device and they changed
// since the last read (a stat of each file), rather than through the
// library's fsnotify watcher: a device plugin writes its spec file and
// then answers the kubelet's Allocate, and the kubelet's CreateContainer
// follows at once; a watcher's refresh runs on its own goroutine and may
// not have run yet, failing the create for a device that is there. The
// check is synchronous, costs a readdir and a stat per file only on
// creates that name a device, and holds no inotify watch nor goroutine.
type CDIRegistry struct {
	dirs  []string
	log   *slog.Logger
	cache *cdiapi.Cache

	mu sync.Mutex
	// seen is the spec directories' fingerprint at the last refresh.
	seen string
	// broken is what the last refresh logged of the files it could not
	// load, so that each change is logged once.
	broken string
}

// NewCDIRegistry reads the spec files of dirs (DefaultCDISpecDirs when
// empty). Directories that do not exist yet are read once they do.
func NewCDIRegistry(dirs []string, log *slog.Logger) *CDIRegistry {
	if len(dirs) == 0 {
		dirs = DefaultCDISpecDirs
	}
	if log == nil {
		log = slog.Default()
	}
	r := &CDIRegistry{dirs: slices.Clone(dirs), log: log}
	r.seen = r.fingerprint()
	// NewCache reads the directories once; its error is always nil.
	r.cache, _ = cdiapi.NewCache(cdiapi.WithSpecDirs(r.dirs...), cdiapi.WithAutoRefresh(false))
	r.logBroken()
	return r
}

// Dirs are the spec directories, lowest priority first.
func (r *CDIRegistry) Dirs() []string { return slices.Clone(r.dirs) }

// Inject implements CDI.
func (r *CDIRegistry) Inject(s *specs.Spec, devices []string) error {
	found, err := r.lookup(devices)
	if err != nil {
		return err
	}
	// A spec file's own edits apply once, before the first of its
	// devices', as the library's InjectDevices does; applied one device
	// at a time, a failure names the device and its file.
	done := map[*cdiapi.Spec]bool{}
	for i, d := range found {
		sp := d.GetSpec()
		if !done[sp] {
			done[sp] = true
			if err := sp.ApplyEdits(s); err != nil {
				return &CDIError{Device: devices[i], Files: []string{sp.GetPath()}, Err: fmt.Errorf("spec file %s: %w", sp.GetPath(), err)}
			}
		}
		if err := d.ApplyEdits(s); err != nil {
			return &CDIError{Device: devices[i], Files: []string{sp.GetPath()}, Err: fmt.Errorf("spec file %s: %w", sp.GetPath(), err)}
		}
	}
	return nil
}

// lookup finds the devices in the spec files as they are now.
func (r *CDIRegistry) lookup(devices []string) ([]*cdiapi.Device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Taken before the read: a file changed during it changes the next
	// fingerprint, and the next create reads again.
	if fp := r.fingerprint(); fp != r.seen {
		r.seen = fp
		r.cache.Refresh() // manual mode: rereads; its errors are per file in GetErrors
		r.logBroken()
	}
	found := make([]*cdiapi.Device, len(devices))
	for i, name := range devices {
		if found[i] = r.cache.GetDevice(name); found[i] == nil {
			return nil, r.unknown(name)
		}
	}
	return found, nil
}

// unknown explains why no spec file gives device name: the files that
// could not be loaded and may have defined it (those of its vendor and
// class, and those too broken to tell), or else the devices of its kind
// that there are.
func (r *CDIRegistry) unknown(name string) error {
	vendor, class, _, _ := parser.ParseQualifiedName(name)
	kind := vendor + "/" + class
	var files, why []string
	for path, errs := range r.cache.GetErrors() {
		if k := specKind(path); k != "" && k != kind {
			continue
		}
		files = append(files, path)
		// The library's messages name the file; a conflict is told
		// in both files' errors.
		for _, e := range errs {
			if !slices.Contains(why, e.Error()) {
				why = append(why, e.Error())
			}
		}
	}
	if len(files) > 0 {
		slices.Sort(files)
		slices.Sort(why)
		return &CDIError{Device: name, Files: files, Err: fmt.Errorf("not defined by any spec file that loads; spec files that could define it are broken (%s): %s", strings.Join(files, ", "), strings.Join(why, "; "))}
	}
	var same []string
	for _, d := range r.cache.ListDevices() {
		if strings.HasPrefix(d, kind+"=") {
			same = append(same, d)
		}
	}
	hint := "no device of kind " + kind + " is defined"
	if len(same) > 0 {
		hint = "the devices of kind " + kind + " are " + strings.Join(same, ", ")
	}
	return &CDIError{Device: name, Unknown: true, Err: fmt.Errorf("no spec file in %s defines it (%s)", strings.Join(r.dirs, ", "), hint)}
}

// kindLine finds a kind key in a file that does not parse, YAML or JSON.
var kindLine = regexp.MustCompile(`(?m)^[\s{]*"?kind"?\s*:\s*["']?([A-Za-z0-9._-]+/[A-Za-z0-9._-]+)`)

// specKind is the kind (vendor/class) a spec file declares, "" when it
// cannot be told: a file whose syntax is broken is looked at line by
// line, so that it does not stand in the way of other vendors' devices.
func specKind(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if raw, err := cdiapi.ParseSpec(data); err == nil && raw != nil {
		return raw.Kind
	}
	if m := kindLine.FindSubmatch(data); m != nil {
		return string(m[1])
	}
	return ""
}

func joinErrs(errs []error) string {
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// logBroken logs the spec files that could not be loaded when that list
// changed: a broken file of one vendor does not fail the creates that ask
// for another's devices, so the log is where it shows.
func (r *CDIRegistry) logBroken() {
	errs := r.cache.GetErrors()
	paths := slices.Sorted(func(yield func(string) bool) {
		for p := range errs {
			if !yield(p) {
				return
			}
		}
	})
	var b strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&b, "%s: %s\n", p, joinErrs(errs[p]))
	}
	if b.String() == r.broken {
		return
	}
	r.broken = b.String()
	for _, p := range paths {
		r.log.Warn("CDI spec file not loaded", "file", p, "error", joinErrs(errs[p]))
	}
}

// fingerprint names every spec file of the directories with its inode,
// size and modification time: a file written in place or renamed over
// another changes it.
func (r *CDIRegistry) fingerprint() string {
	var b strings.Builder
	for _, dir := range r.dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", dir, err)
			continue
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); ext != ".json" && ext != ".yaml" {
				continue
			}
			p := filepath.Join(dir, e.Name())
			fi, err := os.Stat(p) // the library follows symlinks
			if err != nil {
				fmt.Fprintf(&b, "%s: %v\n", p, err)
				continue
			}
			var ino uint64
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				ino = st.Ino
			}
			fmt.Fprintf(&b, "%s %d %d %d %v\n", p, ino, fi.Size(), fi.ModTime().UnixNano(), fi.IsDir())
		}
	}
	return b.String()
}
