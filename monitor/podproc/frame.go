// Package podproc is berth's side of the pod's own process, berth-podproc:
// a small static C program (csrc/, docs/podproc.md), the one process each
// pod keeps (pods made before it keep the Go monitor). This file is the protocol's
// schema in Go, the same as csrc/proto.h; client.go has a typed method per
// operation, start.go starts the process.
//
// Every message is a frame: an 8-byte header (magic, version, type, 0,
// payload length as a little-endian uint32) and a payload of typed fields
// (tag byte, little-endian uint16 length, value). Strings carry their
// terminating NUL and no other; integers are little-endian of exactly
// their width. A field a message's type does not list, a field repeated
// that may not repeat, or a missing required one makes the frame invalid.
package podproc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The protocol's constants (csrc/proto.h).
const (
	Magic = 0xB7
	// Version is the version this side speaks; version 1 was the Go
	// monitor's JSON lines.
	Version    = 2
	MinVersion = 2
	HeaderSize = 8
	// MaxPayload bounds a frame's payload, either way.
	MaxPayload = 65536
	// MaxArgs bounds the arguments and the environment of a request.
	MaxArgs = 256
	// MaxString bounds a string field, its NUL included.
	MaxString = 4096
	// MaxJoin bounds the cgroup directories RUN's process joins.
	MaxJoin = 16
)

// Type is a message's type. A response has its request's type with
// TypeResponse set, or TypeResponse alone when what it answers was not a
// request.
type Type uint8

// Message types.
const (
	TypePing     Type = 1
	TypeRun      Type = 2
	TypeCreate   Type = 3
	TypeStart    Type = 4
	TypeSignal   Type = 5
	TypeWait     Type = 6
	TypeStatus   Type = 7
	TypeExec     Type = 8
	TypeAttach   Type = 9
	TypeReopen   Type = 10
	TypeUpdate   Type = 11
	TypeDelete   Type = 12
	TypeShutdown Type = 13
	typeNops     Type = 14

	FrameStdout     Type = 0x40
	FrameStderr     Type = 0x41
	FrameExit       Type = 0x42
	FrameStdin      Type = 0x43
	FrameStdinClose Type = 0x44
	FrameResize     Type = 0x45

	TypeResponse Type = 0x80
)

// Field tags.
const (
	tagID       = 1
	tagDir      = 2
	tagLog      = 3
	tagArg      = 4
	tagEnv      = 5
	tagFlags    = 6
	tagSignal   = 7
	tagWidth    = 8
	tagHeight   = 9
	tagCgroup   = 10
	tagNetNS    = 11
	tagBlob     = 12
	tagJoin     = 13
	tagUIDMap   = 14
	tagGIDMap   = 15
	tagScope    = 16
	tagCode     = 32
	tagMsg      = 33
	tagPid      = 34
	tagState    = 35
	tagExit     = 36
	tagExitSig  = 37
	tagFinished = 38
	tagOOM      = 39
	tagVMin     = 40
	tagVMax     = 41
	numTags     = 64
)

// Flags of RUN, CREATE, EXEC and ATTACH.
type Flags uint32

// Flags.
const (
	FlagStdin     Flags = 1
	FlagStdinOnce Flags = 2
	FlagStdout    Flags = 4
	FlagStderr    Flags = 8
	FlagTTY       Flags = 16
	FlagNewIPC    Flags = 32
	FlagNewUTS    Flags = 64
	FlagNewPID    Flags = 128
	// FlagSync (RUN): the process gets a pipe at fd 3, whose read end
	// comes back with the response (pause reports "ok" on it).
	FlagSync Flags = 256
	// FlagHostNet (RUN with a uid map): the process stays in the
	// host's network namespace instead of one its user namespace owns.
	FlagHostNet Flags = 512
	// FlagRestore (CREATE): the container's process tree is restored by
	// CRIU from the checkpoint extracted in its dir (monitor.RestoreDir),
	// running once made: no START.
	FlagRestore Flags = 1024
	flagAll     Flags = 2047
)

// Code is a response's outcome.
type Code uint32

// Response codes.
const (
	CodeOK          Code = 0
	CodeInvalid     Code = 1
	CodeNotFound    Code = 2
	CodeNotRunning  Code = 3
	CodeBusy        Code = 4
	CodeVersion     Code = 5
	CodeUnsupported Code = 6
	CodeExists      Code = 7
	CodeFailed      Code = 8
)

var codeNames = [...]string{"ok", "invalid", "not-found", "not-running", "busy", "version", "unsupported", "exists", "failed"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code-%d", uint32(c))
}

// State is a process's state as the pod process sees it.
type State uint32

// States.
const (
	StateCreated State = 1
	StateRunning State = 2
	StateExited  State = 3
)

type kind uint8

const (
	kNone kind = iota
	kStr
	kU32
	kU64
	kBytes
)

var tagKind = [numTags]kind{
	tagID: kStr, tagDir: kStr, tagLog: kStr, tagArg: kStr, tagEnv: kStr, tagFlags: kU32,
	tagSignal: kU32, tagWidth: kU32, tagHeight: kU32, tagCgroup: kStr, tagNetNS: kStr, tagBlob: kBytes, tagJoin: kStr, tagUIDMap: kStr, tagGIDMap: kStr, tagScope: kStr,
	tagCode: kU32, tagMsg: kStr, tagPid: kU32, tagState: kU32, tagExit: kU32, tagExitSig: kU32,
	tagFinished: kU64, tagOOM: kU32, tagVMin: kU32, tagVMax: kU32,
}

func bits(tags ...int) uint64 {
	var b uint64
	for _, t := range tags {
		b |= 1 << t
	}
	return b
}

var (
	exitFields = bits(tagExit, tagExitSig, tagFinished, tagOOM, tagMsg)
	respFields = bits(tagCode, tagMsg, tagPid, tagState, tagVMin, tagVMax) | exitFields
)

// schema: the fields each request may and must carry.
var schema = [typeNops]struct{ may, must uint64 }{
	TypePing: {},
	TypeRun: {bits(tagID, tagDir, tagLog, tagArg, tagEnv, tagFlags, tagCgroup, tagNetNS, tagJoin, tagUIDMap, tagGIDMap, tagScope),
		bits(tagID, tagDir, tagArg)},
	TypeCreate:   {bits(tagID, tagDir, tagLog, tagFlags), bits(tagID, tagDir)},
	TypeStart:    {bits(tagID), bits(tagID)},
	TypeSignal:   {bits(tagID, tagSignal), bits(tagID, tagSignal)},
	TypeWait:     {bits(tagID), bits(tagID)},
	TypeStatus:   {bits(tagID), bits(tagID)},
	TypeExec:     {bits(tagID, tagArg, tagFlags, tagWidth, tagHeight), bits(tagID, tagArg)},
	TypeAttach:   {bits(tagID, tagFlags), bits(tagID)},
	TypeReopen:   {bits(tagID), bits(tagID)},
	TypeUpdate:   {bits(tagID, tagBlob), bits(tagID, tagBlob)},
	TypeDelete:   {bits(tagID), bits(tagID)},
	TypeShutdown: {},
}

func fieldsOf(t Type) (may, must uint64, ok bool) {
	switch {
	case t >= TypeResponse && t < TypeResponse+typeNops:
		return respFields, bits(tagCode), true
	case t >= TypePing && t < typeNops:
		return schema[t].may, schema[t].must, true
	case t == FrameExit:
		return exitFields, bits(tagExit), true
	case t == FrameResize:
		return bits(tagWidth, tagHeight), bits(tagWidth, tagHeight), true
	case t == FrameStdinClose:
		return 0, 0, true
	}
	return 0, 0, false
}

func isRaw(t Type) bool { return t == FrameStdout || t == FrameStderr || t == FrameStdin }

// frame builds one message.
type frame struct {
	b   []byte
	err error
}

func newFrame(t Type) *frame {
	return &frame{b: []byte{Magic, Version, byte(t), 0, 0, 0, 0, 0}}
}

func (f *frame) field(tag int, v []byte) {
	if len(v) > 0xffff {
		f.err = fmt.Errorf("field %d of %d bytes is over the limit", tag, len(v))
		return
	}
	f.b = append(f.b, byte(tag), byte(len(v)), byte(len(v)>>8))
	f.b = append(f.b, v...)
}

func (f *frame) str(tag int, s string) {
	switch {
	case len(s)+1 > MaxString:
		f.err = fmt.Errorf("string field %d of %d bytes is over the limit", tag, len(s))
	case bytes.IndexByte([]byte(s), 0) >= 0:
		f.err = fmt.Errorf("string field %d holds a NUL", tag)
	default:
		f.field(tag, append([]byte(s), 0))
	}
}

func (f *frame) optStr(tag int, s string) {
	if s != "" {
		f.str(tag, s)
	}
}

func (f *frame) u32(tag int, v uint32) { f.field(tag, binary.LittleEndian.AppendUint32(nil, v)) }

func (f *frame) u64(tag int, v uint64) { f.field(tag, binary.LittleEndian.AppendUint64(nil, v)) }

// bytes returns the whole frame.
func (f *frame) bytes() ([]byte, error) {
	if f.err != nil {
		return nil, f.err
	}
	n := len(f.b) - HeaderSize
	if n > MaxPayload {
		return nil, fmt.Errorf("frame payload of %d bytes is over the limit", n)
	}
	binary.LittleEndian.PutUint32(f.b[4:], uint32(n))
	return f.b, nil
}

// message is a decoded frame.
type message struct {
	Version  uint8
	Type     Type
	seen     uint64
	ID       string
	Dir      string
	Log      string
	Cgroup   string
	NetNS    string
	UIDMap   string
	GIDMap   string
	Scope    string
	Msg      string
	Args     []string
	Env      []string
	Join     []string
	Data     []byte
	Flags    Flags
	Signal   uint32
	Width    uint32
	Height   uint32
	Code     Code
	Pid      uint32
	State    State
	Exit     int32
	ExitSig  uint32
	Finished uint64
	OOM      uint32
	VMin     uint32
	VMax     uint32
}

func (m *message) has(tag int) bool { return m.seen&(1<<tag) != 0 }

// Errors of decoding.
var (
	errMagic   = errors.New("not a frame: bad magic")
	errVersion = errors.New("a protocol version this side does not serve")
)

// header checks a frame's header and returns its payload's length.
func header(h []byte) (int, error) {
	if len(h) < HeaderSize {
		return 0, errors.New("short header")
	}
	if h[0] != Magic {
		return 0, errMagic
	}
	n := binary.LittleEndian.Uint32(h[4:])
	if h[3] != 0 || n > MaxPayload {
		return 0, fmt.Errorf("malformed header (reserved byte %d, payload %d bytes)", h[3], n)
	}
	if h[1] < MinVersion || h[1] > Version {
		return int(n), errVersion
	}
	return int(n), nil
}

// decode decodes and checks one whole frame, as csrc/proto.c does.
func decode(b []byte) (*message, error) {
	n, err := header(b)
	if err != nil {
		return nil, err
	}
	if len(b) != HeaderSize+n {
		return nil, fmt.Errorf("frame of %d bytes, header says %d", len(b), HeaderSize+n)
	}
	m := &message{Version: b[1], Type: Type(b[2])}
	p := b[HeaderSize:]
	if isRaw(m.Type) {
		m.Data = p
		return m, nil
	}
	may, must, ok := fieldsOf(m.Type)
	if !ok {
		return nil, fmt.Errorf("unknown message type %#x", uint8(m.Type))
	}
	for len(p) > 0 {
		if len(p) < 3 {
			return nil, errors.New("truncated field")
		}
		tag, fl := int(p[0]), int(binary.LittleEndian.Uint16(p[1:]))
		p = p[3:]
		if len(p) < fl {
			return nil, errors.New("field longer than the frame")
		}
		v := p[:fl]
		p = p[fl:]
		if tag >= numTags || tagKind[tag] == kNone || may&(1<<tag) == 0 {
			return nil, fmt.Errorf("field %d not in the schema of type %#x", tag, uint8(m.Type))
		}
		if m.has(tag) && tag != tagArg && tag != tagEnv && tag != tagJoin {
			return nil, fmt.Errorf("field %d repeated", tag)
		}
		m.seen |= 1 << tag
		var s string
		var u uint32
		switch tagKind[tag] {
		case kStr:
			if fl == 0 || fl > MaxString || v[fl-1] != 0 || bytes.IndexByte(v[:fl-1], 0) >= 0 {
				return nil, fmt.Errorf("string field %d malformed", tag)
			}
			s = string(v[:fl-1])
		case kU32:
			if fl != 4 {
				return nil, fmt.Errorf("u32 field %d of %d bytes", tag, fl)
			}
			u = binary.LittleEndian.Uint32(v)
		case kU64:
			if fl != 8 {
				return nil, fmt.Errorf("u64 field %d of %d bytes", tag, fl)
			}
			m.Finished = binary.LittleEndian.Uint64(v)
		case kBytes:
			m.Data = v
		}
		switch tag {
		case tagID:
			if err := checkID(s); err != nil {
				return nil, err
			}
			m.ID = s
		case tagDir:
			m.Dir = s
		case tagLog:
			m.Log = s
		case tagCgroup:
			m.Cgroup = s
		case tagNetNS:
			m.NetNS = s
		case tagUIDMap:
			m.UIDMap = s
		case tagGIDMap:
			m.GIDMap = s
		case tagScope:
			m.Scope = s
		case tagMsg:
			m.Msg = s
		case tagArg, tagEnv:
			l := &m.Args
			if tag == tagEnv {
				l = &m.Env
			}
			if len(*l) >= MaxArgs {
				return nil, errors.New("too many arguments or environment entries")
			}
			*l = append(*l, s)
		case tagJoin:
			if len(m.Join) >= MaxJoin {
				return nil, errors.New("too many cgroups to join")
			}
			m.Join = append(m.Join, s)
		case tagFlags:
			if Flags(u)&^flagAll != 0 {
				return nil, fmt.Errorf("unknown flags %#x", u)
			}
			m.Flags = Flags(u)
		case tagSignal:
			if u < 1 || u > 64 {
				return nil, fmt.Errorf("signal %d out of range", u)
			}
			m.Signal = u
		case tagWidth, tagHeight:
			if u > 0xffff {
				return nil, fmt.Errorf("terminal size %d out of range", u)
			}
			if tag == tagWidth {
				m.Width = u
			} else {
				m.Height = u
			}
		case tagCode:
			m.Code = Code(u)
		case tagPid:
			m.Pid = u
		case tagState:
			m.State = State(u)
		case tagExit:
			m.Exit = int32(u)
		case tagExitSig:
			m.ExitSig = u
		case tagOOM:
			m.OOM = u
		case tagVMin:
			m.VMin = u
		case tagVMax:
			m.VMax = u
		}
	}
	if m.seen&must != must {
		return nil, fmt.Errorf("a required field of type %#x is missing", uint8(m.Type))
	}
	return m, nil
}

// checkID: an id names files and shows in messages: 1 to 128 bytes of
// printable ASCII, no slash.
func checkID(id string) error {
	if len(id) < 1 || len(id) > 128 {
		return fmt.Errorf("id %q: empty or over 128 bytes", id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 127 || c == '/' {
			return fmt.Errorf("id %q: a character other than printable ASCII, or a slash", id)
		}
	}
	return nil
}
