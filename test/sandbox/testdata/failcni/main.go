// Command failcni is a CNI plugin for tests of failure paths: it runs the
// bridge plugin (found on CNI_PATH) with the same config and environment,
// then fails the ADD anyway, so the pod holds an IP lease and a veth that
// the runtime must release; its DEL fails while the file named by the
// config's refuseDelWhile exists, then is the bridge plugin's.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(fmt.Sprintf("read config: %v", err))
	}
	var conf struct {
		RefuseDelWhile string `json:"refuseDelWhile"`
	}
	json.Unmarshal(stdin, &conf)
	switch os.Getenv("CNI_COMMAND") {
	case "VERSION":
		fmt.Println(`{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}`)
		return
	case "ADD":
		if code := bridge(stdin, io.Discard); code != 0 {
			os.Exit(code)
		}
		fail("test plugin: ADD fails after the bridge plugin attached the pod")
	case "DEL":
		if conf.RefuseDelWhile != "" {
			if _, err := os.Stat(conf.RefuseDelWhile); err == nil {
				fail("test plugin: DEL refused while " + conf.RefuseDelWhile + " exists")
			}
		}
	}
	os.Exit(bridge(stdin, os.Stdout))
}

// bridge runs the bridge plugin on the same input and returns its exit
// code; its answer goes to out.
func bridge(stdin []byte, out io.Writer) int {
	path := ""
	for _, dir := range filepath.SplitList(os.Getenv("CNI_PATH")) {
		if st, err := os.Stat(filepath.Join(dir, "bridge")); err == nil && st.Mode()&0o111 != 0 {
			path = filepath.Join(dir, "bridge")
			break
		}
	}
	if path == "" {
		fail("test plugin: no bridge plugin on CNI_PATH " + os.Getenv("CNI_PATH"))
	}
	cmd := exec.Command(path)
	cmd.Stdin = bytes.NewReader(stdin)
	var answer bytes.Buffer
	cmd.Stdout, cmd.Stderr = &answer, os.Stderr
	err := cmd.Run()
	out.Write(answer.Bytes())
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			if out == io.Discard {
				os.Stdout.Write(answer.Bytes())
			}
			return ee.ExitCode()
		}
		fail(fmt.Sprintf("test plugin: run bridge: %v", err))
	}
	return 0
}

func fail(msg string) {
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "code": 999, "msg": strings.TrimSpace(msg)})
	os.Stdout.Write(b)
	os.Exit(1)
}
