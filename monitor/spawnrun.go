package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// RunSpawn runs the spawn helper bin for a request that starts no
// process (SpawnCheckpoint), as berth itself rather than through a
// pod's process, and returns its error. The helper is killed when ctx
// ends; its stderr (libcontainer's log) ends the error of a helper that
// did not answer.
func RunSpawn(ctx context.Context, bin string, r *SpawnRequest) error {
	req, err := json.Marshal(r)
	if err != nil {
		return err
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer resR.Close()
	// The helper waits for EOF on its ack descriptor before it exits:
	// with the write end closed at once, it sees it straight away.
	ackR, ackW, err := os.Pipe()
	if err != nil {
		resW.Close()
		return err
	}
	ackW.Close()
	defer ackR.Close()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin)
	cmd.Stdin = bytes.NewReader(req)
	cmd.Stderr = &stderr
	// ExtraFiles[i] is descriptor 3+i: SpawnResultFD, then SpawnAckFD.
	cmd.ExtraFiles = []*os.File{resW, ackR}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		resW.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	resW.Close()
	out, _ := io.ReadAll(io.LimitReader(resR, 1<<20))
	waitErr := cmd.Wait()
	res := &SpawnResult{}
	if len(out) == 0 || json.Unmarshal(out, res) != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", bin, ctx.Err())
		}
		return fmt.Errorf("%s gave no answer (%v): %s", bin, waitErr, strings.TrimSpace(stderr.String()))
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}
