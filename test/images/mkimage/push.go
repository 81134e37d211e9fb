package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// readCurrent reads a list of built images: current.json (hack/build-images)
// or e2e.json (hack/e2e-images).
func readCurrent(out, name string) ([]builtImage, error) {
	p := filepath.Join(out, name)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w (run hack/build-images or hack/e2e-images first)", err)
	}
	var current []builtImage
	if err := json.Unmarshal(data, &current); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return current, nil
}

// push pushes every built image of list (a file in out) to registry (host:port, plain HTTP) under all
// its references, several images at a time.
func push(ctx context.Context, out, list, registry, user, password string, jobs int) error {
	current, err := readCurrent(out, list)
	if err != nil {
		return err
	}
	auth := authn.Anonymous
	if user != "" {
		auth = &authn.Basic{Username: user, Password: password}
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithJobs(4)}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, jobs)
	)
	for _, bi := range current {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			if err := pushOne(bi, registry, opts); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", bi.Name, err))
				mu.Unlock()
				return
			}
			log.Printf("pushed %s to %s in %s", bi.Name, registry, time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("push to %s: %v", registry, errs)
	}
	return nil
}

func pushOne(bi builtImage, registry string, opts []remote.Option) error {
	for _, r := range bi.Refs {
		ref, err := name.ParseReference(registry+"/"+r, name.Insecure, name.StrictValidation)
		if err != nil {
			return err
		}
		if bi.Index {
			ii, err := loadIndex(bi.Layout)
			if err != nil {
				return err
			}
			err = remote.WriteIndex(ref, ii, opts...)
			if err != nil {
				return fmt.Errorf("%s: %w", ref, err)
			}
			continue
		}
		img, err := loadImage(bi.Layout)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img, opts...); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
	}
	return nil
}
