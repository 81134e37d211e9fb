// Command nmeter is /bin/nmeter of the Kubernetes e2e images' busybox
// (hack/e2e-images): the part of busybox's nmeter applet the node e2e suite
// uses, which Debian's busybox is built without. The container lifecycle
// specs stamp every line their containers log with
//
//	date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z
//
// so only the time item is supported: %t is the local time (UTC in a
// container without /etc/localtime) as HH:MM:SS, %Nt the same with N (1-6)
// decimals of the second. Other text is copied, %% is a percent sign.
// A line is printed every -d milliseconds (default 1000; 0: no pause) until
// stdout is closed (head -n1 closes it after the first).
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// item is one piece of the format: literal text, or the time with digits
// decimals (digits < 0 for text).
type item struct {
	text   string
	digits int
}

func parse(format string) ([]item, error) {
	var items []item
	var text strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			text.WriteByte(c)
			continue
		}
		i++
		if i < len(format) && format[i] == '%' {
			text.WriteByte('%')
			continue
		}
		digits := 0
		if i < len(format) && format[i] >= '0' && format[i] <= '9' {
			digits = int(format[i] - '0')
			i++
		}
		if i >= len(format) || format[i] != 't' || digits > 6 {
			return nil, fmt.Errorf("unsupported item in %q: only %%t and %%Nt (N 0-6) are", format)
		}
		if text.Len() > 0 {
			items = append(items, item{text: text.String(), digits: -1})
			text.Reset()
		}
		items = append(items, item{digits: digits})
	}
	if text.Len() > 0 {
		items = append(items, item{text: text.String(), digits: -1})
	}
	return items, nil
}

func format(items []item, now time.Time) string {
	var b strings.Builder
	for _, it := range items {
		if it.digits < 0 {
			b.WriteString(it.text)
			continue
		}
		b.WriteString(now.Format("15:04:05"))
		if it.digits > 0 {
			frac := fmt.Sprintf("%06d", now.Nanosecond()/1000)
			b.WriteString("." + frac[:it.digits])
		}
	}
	return b.String()
}

// args reads busybox's command line: [-dMSEC | -d MSEC] FORMAT (Go's flag
// package does not take -d0).
func args(argv []string) (delay int, format string, err error) {
	delay = 1000
	for len(argv) > 0 && strings.HasPrefix(argv[0], "-d") {
		v := strings.TrimPrefix(argv[0], "-d")
		argv = argv[1:]
		if v == "" && len(argv) > 0 {
			v, argv = argv[0], argv[1:]
		}
		if delay, err = strconv.Atoi(v); err != nil || delay < 0 {
			return 0, "", fmt.Errorf("bad -d %q", v)
		}
	}
	if len(argv) != 1 {
		return 0, "", fmt.Errorf("usage: nmeter [-d MSEC] FORMAT")
	}
	return delay, argv[0], nil
}

func main() {
	delay, f, err := args(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nmeter:", err)
		os.Exit(1)
	}
	items, err := parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nmeter:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	for {
		fmt.Fprintln(w, format(items, time.Now()))
		// A write to a closed pipe ends the program (SIGPIPE), as busybox's.
		if err := w.Flush(); err != nil {
			os.Exit(1)
		}
		if delay > 0 {
			time.Sleep(time.Duration(delay) * time.Millisecond)
		}
	}
}
