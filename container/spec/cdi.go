package spec

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// CDIAnnotationPrefix is the prefix of the annotations device plugins
// older than the kubelet's cdi_devices field name CDI devices with
// (cdi.k8s.io/<plugin>_<id>: a comma-separated list of device names).
const CDIAnnotationPrefix = "cdi.k8s.io/"

// CDI gives containers Container Device Interface devices: a device
// plugin or DRA driver names them (vendor.com/class=name) and a spec
// file of the node says what each one is.
type CDI interface {
	// Inject applies to s the edits of the named devices, each's spec
	// file's and its own (device nodes and their cgroup rules, mounts,
	// environment, hooks), in order. A device it cannot give is a
	// *CDIError.
	Inject(s *specs.Spec, devices []string) error
}

// CDIError is a CDI device that cannot be given to a container.
type CDIError struct {
	Device string
	// Files are the spec files at fault: the device's own when its edits
	// do not apply, those that may have defined it but could not be
	// loaded when it is not known.
	Files []string
	// Unknown: no spec file defines the device, and none that might is
	// broken.
	Unknown bool
	Err     error
}

func (e *CDIError) Error() string { return fmt.Sprintf("CDI device %q: %v", e.Device, e.Err) }
func (e *CDIError) Unwrap() error { return e.Err }

// NotFoundError is a request naming something this node does not have
// (a CDI device no spec file defines): the field names the CRI field.
type NotFoundError struct {
	Field string
	Err   error
}

func (e *NotFoundError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *NotFoundError) Unwrap() error { return e.Err }

// IsNotFound tells whether err is a request for something the node does
// not have.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}

// cdiRequest is one CDI device a container's config asks for, with the
// field that asks.
type cdiRequest struct {
	name  string
	field string
}

// CDIDevices lists the CDI devices cfg asks for: cdi_devices first, then
// the cdi.k8s.io/ annotations in key order, each device once (a plugin
// may name a device both ways, as containerd merges them). A name that
// is not a qualified CDI device name is an *InvalidError.
func CDIDevices(cfg *runtimeapi.ContainerConfig) ([]string, error) {
	reqs, err := cdiRequests(cfg)
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.name
	}
	return names, err
}

func cdiRequests(cfg *runtimeapi.ContainerConfig) ([]cdiRequest, error) {
	var reqs []cdiRequest
	seen := map[string]bool{}
	add := func(name, field string) error {
		if _, _, _, err := parser.ParseQualifiedName(name); err != nil {
			return invalid(field, "%q is not a CDI device name (vendor.com/class=name): %w", name, err)
		}
		if !seen[name] {
			seen[name] = true
			reqs = append(reqs, cdiRequest{name: name, field: field})
		}
		return nil
	}
	for i, d := range cfg.GetCDIDevices() {
		if err := add(d.GetName(), fmt.Sprintf("cdi_devices[%d].name", i)); err != nil {
			return nil, err
		}
	}
	var keys []string
	for k := range cfg.GetAnnotations() {
		if strings.HasPrefix(k, CDIAnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for name := range strings.SplitSeq(cfg.GetAnnotations()[k], ",") {
			if err := add(strings.TrimSpace(name), fmt.Sprintf("annotations[%s]", k)); err != nil {
				return nil, err
			}
		}
	}
	return reqs, nil
}

// cdi applies the CDI devices the container asks for, last, so that
// their environment, mounts and device nodes win over the config's and
// the image's as the CDI spec says they do. Without a CDI (enable_cdi =
// false) the names are checked and ignored, as containerd does.
func (b *builder) cdi(s *specs.Spec) error {
	if b.in.Sandbox {
		return nil
	}
	reqs, err := cdiRequests(b.in.Config)
	if err != nil || len(reqs) == 0 || b.in.CDI == nil {
		return err
	}
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.name
	}
	before := make(map[string]bool, len(s.Mounts))
	for _, m := range s.Mounts {
		before[m.Destination] = true
	}
	err = b.in.CDI.Inject(s, names)
	var ce *CDIError
	if !errors.As(err, &ce) {
		if err != nil {
			return fmt.Errorf("CDI devices of container %s: %w", b.in.ID, err)
		}
		return b.idmapCDIBinds(s, before)
	}
	field := "cdi_devices"
	for _, r := range reqs {
		if r.name == ce.Device {
			field = r.field
		}
	}
	if ce.Unknown {
		return &NotFoundError{Field: field, Err: err}
	}
	return &InvalidError{Field: field, Err: err}
}

// idmapCDIBinds id-maps the bind mounts the CDI edits added to a
// container in a pod user namespace, as every other bind mount of it
// (idmapBinds): the library maps them only when the spec carries the
// mappings, which berth's do not (libcontainer reads them from the
// namespace joined), and without it the driver files would belong to
// nobody inside.
func (b *builder) idmapCDIBinds(s *specs.Spec, before map[string]bool) error {
	if u, err := b.userNamespace(); err != nil || u == nil {
		return err
	}
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if before[m.Destination] || len(m.UIDMappings) > 0 {
			continue
		}
		opt := ""
		if m.Type == "bind" {
			opt = "idmap"
		}
		for _, o := range m.Options {
			switch o {
			case "bind":
				opt = "idmap"
			case "rbind":
				opt = "ridmap"
			}
		}
		if opt != "" && !slices.Contains(m.Options, "idmap") && !slices.Contains(m.Options, "ridmap") {
			m.Options = append(m.Options, opt)
		}
	}
	return nil
}
