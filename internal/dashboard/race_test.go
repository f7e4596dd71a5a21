//go:build race

package dashboard_test

// raceEnabled: the race detector multiplies a process's memory, so the
// RSS measurement means nothing under it.
const raceEnabled = true
