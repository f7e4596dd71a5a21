package jobs

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A processor with an Announcer announces its progress on Redis pub/sub,
// paced per shard, every shard's end always; WatchProgress hears every
// announcement and reports each (re)subscription, after which the
// listener reads everything again, so a broken connection loses nothing.
func TestProgressIsAnnouncedAndHeard(t *testing.T) {
	e := newEnv(t)
	var values []string
	for i := range 20 {
		values = append(values, fmt.Sprintf("co-%d", i))
	}
	j := e.submit(slugs(values...)) // two shards of 10, batches of 4: 3 per shard

	ctx, cancel := context.WithCancel(e.ctx)
	subscribed := make(chan struct{}, 10)
	type heardMsg struct {
		id    string
		ended bool
	}
	heard := make(chan heardMsg, 100)
	var broken atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- e.st.WatchProgress(ctx, ProgressHandler{
			Subscribed: func() { subscribed <- struct{}{} },
			Job:        func(id string, ended bool) { heard <- heardMsg{id, ended} },
			Broken:     func(error) { broken.Add(1) },
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchProgress: %v", err)
		}
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-subscribed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no subscription %s", what)
		}
	}
	wait("at the start")

	// Without an Announcer nothing is announced (standalone mode).
	quiet := e.processor("quiet", newMapAnswerer(nil))
	if err := quiet.ProcessShard(e.ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	// With one whose pace is an hour: the first batch of a shard and its
	// end, nothing in between.
	p := e.processor("loud", newMapAnswerer(nil))
	p.Announce = NewAnnouncer(e.st, time.Hour, discard)
	if err := p.ProcessShard(e.ctx, j.ID, 1); err != nil {
		t.Fatal(err)
	}
	for i, ended := range []bool{false, true} {
		select {
		case m := <-heard:
			if m.id != j.ID || m.ended != ended {
				t.Fatalf("announcement %d: %+v, want job %s ended %v", i, m, j.ID, ended)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("heard %d announcements, want 2 (the first batch, the end)", i)
		}
	}
	select {
	case m := <-heard:
		t.Fatalf("a third announcement (%+v): the pace or the quiet processor failed", m)
	case <-time.After(300 * time.Millisecond):
	}

	// The server drops the subscriber: it subscribes again and says so.
	if err := e.rdb.ClientKillByFilter(e.ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	wait("after the connection was killed")
	if broken.Load() == 0 {
		t.Fatal("the broken subscription was not reported")
	}
	if err := e.st.PublishProgress(e.ctx, "after", true); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-heard:
		if m.id != "after" || !m.ended {
			t.Fatalf("heard %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing heard after the new subscription")
	}
}
