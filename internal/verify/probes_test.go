package verify_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

// A greylisted address retried by another process (a retry Job's pod) is
// confirmed: the two processes share the domain's probe through Redis, so
// the probe the first attempt sent passes the greylist on the second. With
// per-process probes the second process's fresh probe would be greylisted
// again and the address could never be deliverable.
func TestSharedProbePassesGreylistInAnotherProcess(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{Greylist: 500 * time.Millisecond, Tarpit: 3 * time.Second}))
	rdb, _ := testredis.Client(t)
	newProcess := func() *verify.Verifier {
		cfg := worldConfig(w)
		cfg.Probes = verify.NewRedisProbes(rdb)
		v, err := verify.New(cfg, nil, verify.NewRedisLimiter(rdb, verify.LimiterOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ctx := context.Background()
	first := newProcess().VerifyOne(ctx, "alice@grey.test")
	if first.Status != verify.StatusUnknown || first.Reason != verify.ReasonGreylisted || !first.Temporary {
		t.Fatalf("first attempt: %+v", first)
	}
	time.Sleep(700 * time.Millisecond)
	second := newProcess().VerifyOne(ctx, "alice@grey.test")
	if second.Status != verify.StatusDeliverable || second.Reason != verify.ReasonAccepted {
		t.Fatalf("retry in another process: %s/%s", second.Status, second.Reason)
	}
}
