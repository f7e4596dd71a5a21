package browsertest

import (
	"sync"

	"github.com/chromedp/cdproto/network"
)

// weights counts what the browser received over the network, per request
// URL (encoded bytes, as transferred: headers and compressed bodies).
type weights struct {
	mu    sync.Mutex
	byID  map[network.RequestID]string
	byURL map[string]int64
}

func (w *weights) listen(ev any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		w.byID[e.RequestID] = e.Request.URL
	case *network.EventLoadingFinished:
		if u, ok := w.byID[e.RequestID]; ok {
			w.byURL[u] += int64(e.EncodedDataLength)
			delete(w.byID, e.RequestID)
		}
	case *network.EventLoadingFailed:
		delete(w.byID, e.RequestID)
	}
}

// ResetWeight forgets what was counted so far.
func (b *Browser) ResetWeight() {
	b.weights.mu.Lock()
	defer b.weights.mu.Unlock()
	b.weights.byURL = map[string]int64{}
}

// Transferred is the bytes received since the last ResetWeight, in all and
// by URL: load one page after ResetWeight to weigh it (its document and
// every asset it pulled that was not cached).
func (b *Browser) Transferred() (total int64, byURL map[string]int64) {
	b.weights.mu.Lock()
	defer b.weights.mu.Unlock()
	byURL = make(map[string]int64, len(b.weights.byURL))
	for u, n := range b.weights.byURL {
		byURL[u] = n
		total += n
	}
	return total, byURL
}
