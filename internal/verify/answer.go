package verify

import (
	"context"
	"time"
)

// answer records the RCPT reply of one address. It returns true instead
// when the address was greylisted and is to be asked again in this call.
// Caller holds r.mu.
func (r *run) answer(it *item, host string, rep reply, cl rcptClass, verdict int, probeTemp reply) bool {
	it.mxHost, it.code = host, rep.code
	switch cl {
	case rcAccepted:
		switch verdict {
		case 1:
			it.catchAll = true
			it.reason = ReasonCatchAll
		case 2:
			it.reason = ReasonAccepted
		default:
			// The probe was answered 4xx: we cannot tell a real mailbox
			// from a catch-all yet, so nothing is deliverable.
			it.reason, it.temporary = ReasonTemporaryFailure, true
			if classify(probeTemp) == rcGreylisted {
				it.reason = ReasonGreylisted
				if r.canGreyRetry(it) {
					return true
				}
			}
			it.retryAfter = retryFor(it.reason, probeTemp)
			it.done = true
			r.ready(it)
			return false
		}
		if it.dom.disposable {
			it.reason = ReasonDisposable
		}
	case rcNotFound:
		it.reason = ReasonMailboxNotFound
	case rcDisabled:
		it.reason = ReasonMailboxDisabled
	case rcFull:
		it.reason = ReasonMailboxFull
		it.temporary = rep.code/100 == 4
	case rcRejected:
		it.reason = ReasonRejected
	case rcBlocked:
		it.reason, it.temporary = ReasonBlocked, true
	case rcGreylisted:
		it.reason, it.temporary = ReasonGreylisted, true
		if r.canGreyRetry(it) {
			return true
		}
	default:
		it.reason, it.temporary = ReasonTemporaryFailure, true
	}
	if it.temporary {
		it.retryAfter = retryFor(it.reason, rep)
	}
	it.done = true
	r.ready(it)
	return false
}

// canGreyRetry reports whether a greylisted address may be asked again in
// this call, and marks it as asked. Caller holds r.mu.
func (r *run) canGreyRetry(it *item) bool {
	wait := r.v.cfg.GreylistRetry
	if wait <= 0 || it.greyRetried {
		return false
	}
	if dl, ok := r.ctx.Deadline(); ok && time.Until(dl) < wait+time.Second {
		return false
	}
	it.greyRetried = true
	return true
}

// greyRetry queues j again after GreylistRetry, with the same probe
// address so the greylist lets the probe through too. If ctx ends first
// its addresses are answered greylisted. Caller holds r.mu.
func (r *run) greyRetry(j *job) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(r.v.cfg.GreylistRetry)
		defer t.Stop()
		select {
		case <-t.C:
			r.mu.Lock()
			r.route(j)
			r.mu.Unlock()
		case <-r.ctx.Done():
			r.mu.Lock()
			r.finish(j.items, ReasonGreylisted, "", 0)
			for _, it := range j.items {
				it.retryAfter = 5 * time.Minute
			}
			r.mu.Unlock()
		}
	}()
}

// probeFor returns the domain's probe local part: random, but the same for
// a day (cached across calls), because greylisting keys on the recipient
// and a new random probe would be greylisted on every attempt.
func (r *run) probeFor(d *domainState) string {
	r.mu.Lock()
	p := d.probe
	r.mu.Unlock()
	if p != "" {
		return p
	}
	p, cached := r.v.probes.get(d.name, time.Now())
	if !cached {
		p = probeLocal()
		if st := r.v.cfg.Probes; st != nil {
			// Shared with every process; without the store (Redis down)
			// the process's own probe still serves its own retries. Not
			// under r.mu: the round trip must not stall the call's other
			// sessions.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Second)
			if shared, err := st.Probe(ctx, d.name, p, probeTTL); err == nil && shared != "" {
				p = shared
			}
			cancel()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if d.probe == "" {
		// The first of the call's sessions to get here decides.
		d.probe = p
		if !cached {
			r.v.probes.put(d.name, p, time.Now().Add(r.v.localProbeTTL()))
		}
	}
	return d.probe
}

// probeTTL is how long a domain keeps its probe address.
const probeTTL = 24 * time.Hour

// retryFor suggests when to ask again: the server's own hint ("try again in
// 60 seconds") when it gives one, else a default by reason.
func retryFor(reason string, rep reply) time.Duration {
	if d := retryHint(rep.text); d > 0 {
		return d
	}
	switch reason {
	case ReasonGreylisted:
		return 5 * time.Minute
	case ReasonMailboxFull:
		return time.Hour
	}
	return 15 * time.Minute
}

func (r *run) setRetry(its []*item, rep reply) {
	for _, it := range its {
		if it.temporary {
			it.retryAfter = retryFor(it.reason, rep)
		}
	}
}
