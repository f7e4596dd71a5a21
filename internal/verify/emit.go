package verify

import "time"

// Answers as they arrive (issue 25): VerifyEach hands each address's Result
// to its caller when it is known, so a slow server holds back only its own
// addresses. Items are marked ready under the call's lock where they are
// answered (finish, answer); one goroutine builds their Results under the
// lock (so whatever the same critical section set after marking them, a
// RetryAfter say, is in) and calls each outside it.

// emitter is a VerifyEach call's hand-over.
type emitter struct {
	each    func(idxs []int, r Result)
	pending []*item // answered, not handed over yet; under run.mu
	wake    chan struct{}
}

// ready queues an answered item for the caller. Caller holds r.mu.
func (r *run) ready(it *item) {
	if r.em == nil {
		return
	}
	r.em.pending = append(r.em.pending, it)
	select {
	case r.em.wake <- struct{}{}:
	default:
	}
}

// startEmitting starts handing answers to each (nil: nothing to do) and
// returns the function that stops it once the call's sessions have ended,
// after handing over what is left.
func (r *run) startEmitting(each func(idxs []int, r Result)) (stop func()) {
	if each == nil {
		return func() {}
	}
	r.mu.Lock()
	r.em = &emitter{each: each, wake: make(chan struct{}, 1)}
	r.mu.Unlock()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-r.em.wake:
				r.emit()
			case <-quit:
				r.emit()
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// emit hands the ready items over.
func (r *run) emit() {
	r.mu.Lock()
	its := r.em.pending
	r.em.pending = nil
	now := time.Now().UTC()
	out := make([]Result, len(its))
	for k, it := range its {
		out[k] = r.v.result(it, now)
		it.emitted = &out[k]
	}
	r.mu.Unlock()
	for k, it := range its {
		if r.ctx.Err() != nil {
			// Answers made after the caller's ctx ended may be cut short
			// (a greylist wait given up): not handed over.
			return
		}
		r.em.each(it.idxs, out[k])
	}
}
