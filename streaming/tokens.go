package streaming

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sync"
	"time"
)

// errTooManyRequests: more URLs were handed out, and not yet used or
// expired, than the cache holds.
var errTooManyRequests = errors.New("too many streaming requests in flight")

// tokens maps single-use URL tokens to the request they were issued for.
// A token is unguessable (128 random bits), works once, and expires.
type tokens struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu      sync.Mutex
	entries map[string]tokenEntry
}

type tokenEntry struct {
	req     any // *runtimeapi.ExecRequest, AttachRequest or PortForwardRequest
	expires time.Time
}

func newTokens(ttl time.Duration, max int, now func() time.Time) *tokens {
	return &tokens{ttl: ttl, max: max, now: now, entries: map[string]tokenEntry{}}
}

// issue stores req and returns its token.
func (t *tokens) issue(req any) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.entries) >= t.max {
		t.expire(now)
		if len(t.entries) >= t.max {
			return "", errTooManyRequests
		}
	}
	t.entries[tok] = tokenEntry{req: req, expires: now.Add(t.ttl)}
	return tok, nil
}

// use returns the request of a live token and forgets the token, so that
// it cannot be used twice.
func (t *tokens) use(tok string) (any, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[tok]
	if !ok {
		return nil, false
	}
	delete(t.entries, tok)
	if !t.now().Before(e.expires) {
		return nil, false
	}
	return e.req, true
}

// expire drops expired tokens; the caller holds mu. It runs only when the
// cache is full, so it costs nothing in the common case.
func (t *tokens) expire(now time.Time) {
	for tok, e := range t.entries {
		if !now.Before(e.expires) {
			delete(t.entries, tok)
		}
	}
}
