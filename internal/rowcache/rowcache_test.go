package rowcache

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chunkOf renders rows like the engine does: objects joined by commas.
func chunkOf(rows ...string) *Chunk {
	c := &Chunk{Total: int64(len(rows))}
	for i, r := range rows {
		if i > 0 {
			c.Data = append(c.Data, ',')
		}
		c.Data = append(c.Data, r...)
		c.Ends = append(c.Ends, int32(len(c.Data)))
	}
	return c
}

func TestSlice(t *testing.T) {
	c := chunkOf(`{"a":1}`, `{"b":22}`, `{"c":333}`)
	for _, tc := range []struct {
		lo, hi int
		want   string
	}{
		{0, 1, `{"a":1}`}, {0, 3, `{"a":1},{"b":22},{"c":333}`}, {1, 2, `{"b":22}`}, {1, 3, `{"b":22},{"c":333}`}, {2, 3, `{"c":333}`},
	} {
		if got := string(c.Slice(tc.lo, tc.hi)); got != tc.want {
			t.Errorf("Slice(%d,%d) = %s, want %s", tc.lo, tc.hi, got, tc.want)
		}
	}
}

func fixed(c *Chunk) func() (*Chunk, error) { return func() (*Chunk, error) { return c, nil } }

// The cache never holds more than its bound and evicts the least recently
// used chunk first.
func TestBoundAndLRU(t *testing.T) {
	one := chunkOf(strings.Repeat("x", 840))
	per := one.size()
	c := New(3 * per)
	for i := 0; i < 3; i++ {
		if _, err := c.Load("job", i, fixed(chunkOf(strings.Repeat("x", 840)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := c.Get("job", 0); !ok { // 0 is now the most recent; 1 the oldest
		t.Fatal("chunk 0 missing")
	}
	if _, err := c.Load("job", 3, fixed(chunkOf(strings.Repeat("x", 840)))); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("job", 1); ok {
		t.Error("chunk 1 (least recently used) was kept")
	}
	for _, i := range []int{0, 2, 3} {
		if _, ok := c.Get("job", i); !ok {
			t.Errorf("chunk %d evicted", i)
		}
	}
	s := c.Stats()
	if s.Bytes > s.MaxBytes || s.Chunks != 3 || s.Evictions != 1 {
		t.Errorf("stats %+v", s)
	}
	// A chunk bigger than the whole cache is served but not kept, and
	// evicts nothing.
	big := chunkOf(strings.Repeat("y", int(4*per)))
	got, err := c.Load("job", 9, fixed(big))
	if err != nil || got != big {
		t.Fatalf("oversize load: %v", err)
	}
	if _, ok := c.Get("job", 9); ok || c.Stats().Chunks != 3 {
		t.Error("an oversize chunk was kept or evicted others")
	}
}

// Concurrent readers of a missing chunk fill it once; a failed fill is
// not remembered.
func TestLoadOnce(t *testing.T) {
	c := New(1 << 20)
	var fills atomic.Int32
	release := make(chan struct{})
	fill := func() (*Chunk, error) {
		fills.Add(1)
		<-release
		return chunkOf(`{"n":1}`), nil
	}
	var wg sync.WaitGroup
	got := make([]*Chunk, 20)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := c.Load("j", 0, fill)
			if err != nil {
				t.Error(err)
			}
			got[i] = ch
		}()
	}
	time.Sleep(50 * time.Millisecond) // let them all pile up on the one fill
	close(release)
	wg.Wait()
	if n := fills.Load(); n != 1 {
		t.Errorf("%d fills for one chunk", n)
	}
	for i, ch := range got {
		if ch != got[0] {
			t.Errorf("reader %d got another chunk", i)
		}
	}
	boom := errors.New("redis down")
	if _, err := c.Load("j", 1, func() (*Chunk, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed fill: %v", err)
	}
	if _, ok := c.Get("j", 1); ok {
		t.Error("a failed fill was cached")
	}
	if _, err := c.Load("j", 1, fixed(chunkOf(`{}`))); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("j", 1); !ok {
		t.Error("the retried fill was not cached")
	}
}

func TestDropJob(t *testing.T) {
	c := New(1 << 20)
	for _, job := range []string{"a", "b"} {
		for i := 0; i < 3; i++ {
			if _, err := c.Load(job, i, fixed(chunkOf(fmt.Sprintf(`{"%s":%d}`, job, i)))); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.DropJob("a")
	for i := 0; i < 3; i++ {
		if _, ok := c.Get("a", i); ok {
			t.Errorf("a/%d kept", i)
		}
		if _, ok := c.Get("b", i); !ok {
			t.Errorf("b/%d dropped", i)
		}
	}
	if s := c.Stats(); s.Chunks != 3 || s.Bytes != 3*chunkOf(`{"b":0}`).size() {
		t.Errorf("stats after drop %+v", s)
	}
}

// A nil cache holds nothing and fills every time.
func TestNilCache(t *testing.T) {
	var c *Cache
	if _, ok := c.Get("j", 0); ok {
		t.Error("nil cache hit")
	}
	ch, err := c.Load("j", 0, fixed(chunkOf(`{}`)))
	if err != nil || ch.Rows() != 1 {
		t.Errorf("nil cache load: %v %v", ch, err)
	}
	c.DropJob("j")
	if s := c.Stats(); s != (Stats{}) {
		t.Errorf("nil stats %+v", s)
	}
}

// A fill that panics releases the readers waiting on it with an error and
// leaves nothing behind, so the next reader fills again.
func TestLoadFillPanics(t *testing.T) {
	c := New(1 << 20)
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		defer func() { _ = recover() }()
		_, _ = c.Load("j", 0, func() (*Chunk, error) {
			close(started)
			<-release
			panic("render bug")
		})
	}()
	<-started
	waiter := make(chan error, 1)
	go func() {
		_, err := c.Load("j", 0, fixed(chunkOf(`{"never":1}`)))
		waiter <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter join the fill
	close(release)
	select {
	case err := <-waiter:
		if !errors.Is(err, errFillPanicked) {
			t.Fatalf("waiter: %v, want errFillPanicked", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter of a panicked fill hangs")
	}
	if ch, err := c.Load("j", 0, fixed(chunkOf(`{"n":2}`))); err != nil || ch.Rows() != 1 {
		t.Fatalf("fill after the panic: %v, %v", ch, err)
	}
}
