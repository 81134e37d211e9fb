package apparmor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Paths are where a System looks; tests point them into a temp dir.
type Paths struct {
	Enabled  string // the module's enabled parameter, "Y" when on
	Profiles string // securityfs's list of loaded profiles
	Etc      string // the parser's include directory
	Parser   string // apparmor_parser, a name looked up on PATH or a path
	// Container is the file systemd leaves in a container's /run.
	Container string
}

// SystemPaths are the kernel's and the distribution's.
var SystemPaths = Paths{
	Enabled:   "/sys/module/apparmor/parameters/enabled",
	Profiles:  "/sys/kernel/security/apparmor/profiles",
	Etc:       "/etc/apparmor.d",
	Parser:    "apparmor_parser",
	Container: "/run/systemd/container",
}

// loadTimeout bounds one apparmor_parser run: it compiles the profile,
// which takes well under a second.
const loadTimeout = time.Minute

// System loads berth's default profile into the kernel and answers
// which profiles are loaded.
type System struct {
	paths  Paths
	record string // <state>/apparmor/berth-default: the text last loaded
	log    *slog.Logger
	// unusable is why containers cannot be confined; "" when they can.
	unusable string
	parser   string // the parser's resolved path
	// text is the default profile, generated once: what it includes
	// from the host does not change under a running berth.
	text []byte

	mu sync.Mutex // serialises loads
}

// New looks at the host once: whether AppArmor is there and berth can
// load profiles. state is berth's state directory.
func New(state string, paths Paths, log *slog.Logger) *System {
	if log == nil {
		log = slog.Default()
	}
	s := &System{paths: paths, record: filepath.Join(state, "apparmor", DefaultProfile), log: log.With("component", "apparmor")}
	s.parser, s.unusable = check(paths)
	if s.unusable == "" {
		var err error
		if s.text, err = Generate(DefaultProfile, paths.Etc); err != nil {
			s.unusable = fmt.Sprintf("apparmor profile %s: %v", DefaultProfile, err)
		}
	}
	if s.unusable != "" {
		s.log.Info("containers run without AppArmor", "reason", s.unusable)
	}
	return s
}

// check returns the parser's path, or why AppArmor cannot be used.
func check(p Paths) (string, string) {
	if b, err := os.ReadFile(p.Enabled); err != nil || !bytes.HasPrefix(b, []byte("Y")) {
		return "", "AppArmor is not enabled in this host's kernel"
	}
	if _, err := os.Stat(p.Profiles); err != nil {
		return "", "AppArmor's securityfs (" + p.Profiles + ") is not mounted"
	}
	// Inside a container, the profiles berth would load are the host's
	// (AppArmor is not namespaced there), as containerd reasons.
	if os.Getenv("container") != "" {
		return "", "berth runs inside a container"
	}
	if _, err := os.Stat(p.Container); err == nil {
		return "", "berth runs inside a container"
	}
	parser, err := exec.LookPath(p.Parser)
	if err != nil {
		return "", "apparmor_parser is not installed"
	}
	return parser, ""
}

// Usable returns nil when containers can be confined, else why not.
func (s *System) Usable() error {
	if s.unusable != "" {
		return errors.New(s.unusable)
	}
	return nil
}

// Loaded tells whether the kernel has a profile of that name.
func (s *System) Loaded(name string) bool {
	b, err := os.ReadFile(s.paths.Profiles)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// "name (enforce)"; a name may hold spaces.
		if n, _, ok := strings.Cut(sc.Text(), " ("); ok && n == name {
			return true
		}
	}
	return false
}

// EnsureDefault loads the default profile unless the kernel has it as
// last loaded, and returns its name. Containers call it, so that a
// profile someone removed comes back with the next one.
func (s *System) EnsureDefault(ctx context.Context) (string, error) {
	if err := s.Usable(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, err := os.ReadFile(s.record); err == nil && bytes.Equal(old, s.text) && s.Loaded(DefaultProfile) {
		return DefaultProfile, nil
	}
	if err := s.load(ctx, s.text); err != nil {
		return "", err
	}
	s.log.Info("loaded AppArmor profile", "profile", DefaultProfile)
	return DefaultProfile, nil
}

// load replaces the profile in the kernel (-r), leaving the parser's
// cache alone (-K), and records the text once the parser took it.
func (s *System) load(ctx context.Context, text []byte) error {
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.parser, "-Kr")
	cmd.Stdin = bytes.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apparmor_parser: load profile %s: %w: %s", DefaultProfile, err, bytes.TrimSpace(out))
	}
	if err := os.MkdirAll(filepath.Dir(s.record), 0o700); err != nil {
		return fmt.Errorf("apparmor profile %s: %w", DefaultProfile, err)
	}
	tmp := s.record + ".tmp"
	if err := os.WriteFile(tmp, text, 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("apparmor profile %s: %w", DefaultProfile, err)
	}
	if err := os.Rename(tmp, s.record); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("apparmor profile %s: %w", DefaultProfile, err)
	}
	return nil
}
