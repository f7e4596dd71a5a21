package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// cpuByCommand is the CPU time (user + system, seconds) of every process on
// the machine, summed by command name (/proc/<pid>/stat's comm): the bench
// reads it before and after a phase to say where the 2 cores went (the
// control plane's processes are started by envtest and by this bench).
func cpuByCommand() map[string]float64 {
	out := map[string]float64{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if lp < 0 || rp < lp {
			continue
		}
		f := strings.Fields(s[rp+1:])
		if len(f) < 13 { // state is field 3; utime, stime are 14, 15
			continue
		}
		u, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[s[lp+1:rp]] += (u + st) / 100 // USER_HZ is 100 on Linux
	}
	return out
}

// cpuSpent is what each command spent between two readings, largest
// first, as "name 12.3s" (commands under 0.5 s left out).
func cpuSpent(before, after map[string]float64) []string {
	type e struct {
		name string
		s    float64
	}
	var es []e
	for n, v := range after {
		if d := v - before[n]; d >= 0.5 {
			es = append(es, e{n, d})
		}
	}
	slices.SortFunc(es, func(a, b e) int { return int((b.s - a.s) * 1000) })
	out := make([]string, 0, len(es))
	for _, x := range es {
		out = append(out, fmt.Sprintf("%s %.1fs", x.name, x.s))
	}
	return out
}
