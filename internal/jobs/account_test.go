package jobs

import (
	"errors"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// The account's users see every job of the account, newest first, whichever
// key made it; another account's job stays hidden; ids of jobs that are gone
// (rolled back, expired) are skipped and pruned from the index.
func TestAccountJobs(t *testing.T) {
	e := newEnv(t)
	other := *e.p
	other.Key.ID = "other-key-of-the-same-account"
	as := accounts.NewStore(e.rdb, nil)
	acct, err := as.CreateAccount(e.ctx, "stranger", credits.Whole(10))
	if err != nil {
		t.Fatal(err)
	}
	stranger := accounts.Principal{Account: *acct, Key: accounts.Key{ID: "k-stranger", AccountID: acct.ID}}

	a := e.submit(slugs("a"))
	time.Sleep(2 * time.Millisecond) // distinct creation times order the index
	gone := e.submit(slugs("b"))
	time.Sleep(2 * time.Millisecond)
	b, err := e.eng.Submit(e.ctx, &other, slugs("c", "d"), Metering{Price: 1})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := e.eng.Submit(e.ctx, &stranger, slugs("e"), Metering{Price: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.Delete(e.ctx, gone.ID); err != nil {
		t.Fatal(err)
	}

	js, err := e.eng.AccountJobs(e.ctx, e.p.Account.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(js) != 2 || js[0].ID != b.ID || js[1].ID != a.ID {
		t.Fatalf("account jobs %v, want [%s %s]", ids(js), b.ID, a.ID)
	}
	if js[0].KeyID != other.Key.ID || js[0].TotalRows != 2 {
		t.Errorf("newest job %+v", js[0])
	}
	if n := e.rdb.ZCard(e.ctx, accountJobsKey(e.p.Account.ID)).Val(); n != 2 {
		t.Errorf("index holds %d ids after the read, want the deleted job pruned (2)", n)
	}
	if js, _ := e.eng.AccountJobs(e.ctx, e.p.Account.ID, 1); len(js) != 1 || js[0].ID != b.ID {
		t.Errorf("limit 1: %v", ids(js))
	}

	if j, err := e.eng.GetInAccount(e.ctx, e.p.Account.ID, b.ID); err != nil || j.ID != b.ID {
		t.Errorf("GetInAccount of another key's job of the account: %v, %v", j, err)
	}
	if _, err := e.eng.GetInAccount(e.ctx, e.p.Account.ID, theirs.ID); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("GetInAccount of another account's job: %v, want ErrJobNotFound", err)
	}
	// The API's per-key rule is unchanged.
	if _, err := e.eng.Get(e.ctx, e.p.Key.ID, b.ID); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("Get by another key: %v, want ErrJobNotFound", err)
	}
}

func ids(js []*Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}
