package billing

// The ledger is an audit log: one Redis stream per account
// (accounts.LedgerKey), appended to by the same script that moves the
// money, never trimmed by those scripts (no XADD carries MAXLEN or MINID;
// TestLedgerIsNeverTrimmedSilently keeps it so). Its memory is bounded by
// archiving: an operator exports the entries before a date to a file
// (`bulkd admin ledger export --archive`), and only once that file is
// written and fsynced are exactly those entries deleted, batch by batch,
// each batch in one script that also adds the batch's totals to the
// account's archive marker. The marker keeps the books whole:
//
//	balance = opening balance + archived credits + credits still in the stream
//
// which Reconcile checks for one account (the load and fault suites call it
// for every account after their faults).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// archiveKey is the hash recording what has been archived (exported and
// deleted) of an account's ledger: through which entry id, how many
// entries, and their totals per unit. It shares the account's hash tag.
func archiveKey(accountID string) string { return accounts.LedgerKey(accountID) + ":archived" }

// ledgerPage is how many entries one XRANGE reads.
const ledgerPage = 1000

// archiveBatch is how many entries one archive script deletes: it checks
// them one by one (an XRANGE of the batch) before it trims, so it must stay
// small enough to keep Redis free for everyone else (about a millisecond).
const archiveBatch = 1000

// Archived is an account's archive marker.
type Archived struct {
	// Through is the id of the last archived entry ("" when nothing has
	// been archived): every entry up to it is in an export file, none of
	// them is in the stream.
	Through string `json:"through,omitempty"`
	// Entries is how many entries were archived.
	Entries int64 `json:"entries"`
	// Credits is the sum of the archived entries' credit amounts.
	Credits credits.Amount `json:"credits"`
	// Units is the sum of the archived entries' amounts per quota unit
	// (bulk_searches, single_lookups).
	Units map[string]int64 `json:"units,omitempty"`
	// At is when the last batch was archived.
	At time.Time `json:"archived_at,omitzero"`
}

// Reconciliation is the check that an account's balance is what its
// ledger says it is.
type Reconciliation struct {
	AccountID string         `json:"account"`
	Balance   credits.Amount `json:"balance"`
	// Opening is the balance the account was created with (the ledger
	// records every change after it).
	Opening credits.Amount `json:"opening_balance"`
	// OpeningInferred: the account predates the opening_balance field;
	// Opening was inferred from the first retained entry, so a missing
	// first entry would go unnoticed.
	OpeningInferred bool     `json:"opening_inferred,omitempty"`
	Archived        Archived `json:"archived"`
	// Ledger is the sum of the credit amounts still in the stream, Entries
	// how many entries (all units) it holds, Through the last one read.
	Ledger  credits.Amount `json:"ledger_credits"`
	Entries int64          `json:"ledger_entries"`
	Through string         `json:"through,omitempty"`
	// Breaks lists entries whose "after" does not follow from the previous
	// balance and their amount: a movement without an entry happened before
	// each of them.
	Breaks []string `json:"breaks,omitempty"`
}

// Sum is what the ledger says the balance is.
func (r *Reconciliation) Sum() credits.Amount { return r.Opening + r.Archived.Credits + r.Ledger }

// Err is nil when the balance equals the ledger and the ledger's running
// balance has no gap.
func (r *Reconciliation) Err() error {
	if r.Balance != r.Sum() {
		return fmt.Errorf("account %s: balance %s, ledger says %s (opening %s + archived %s + entries %s)",
			r.AccountID, r.Balance, r.Sum(), r.Opening, r.Archived.Credits, r.Ledger)
	}
	if len(r.Breaks) > 0 {
		return fmt.Errorf("account %s: the ledger's running balance breaks at %s", r.AccountID, strings.Join(r.Breaks, ", "))
	}
	return nil
}

// rawEntry is one stream entry (as Entries reads it) with its amounts as
// stored (milli-credits for credits, units for quotas).
type rawEntry struct {
	Entry
	amount, after int64
}

func parseEntry(m redis.XMessage) (rawEntry, error) {
	r := rawEntry{Entry: entryOf(m)}
	amount, _ := m.Values["amount"].(string)
	after, _ := m.Values["after"].(string)
	var err error
	if r.amount, err = strconv.ParseInt(amount, 10, 64); err != nil {
		return r, fmt.Errorf("ledger entry %s: amount %q: %w", m.ID, amount, err)
	}
	if r.after, err = strconv.ParseInt(after, 10, 64); err != nil {
		return r, fmt.Errorf("ledger entry %s: after %q: %w", m.ID, after, err)
	}
	return r, nil
}

// scan reads the entries of an account's ledger in (from, to], page by
// page, oldest first ("" from: the beginning; "" to: the end).
func (b *Billing) scan(ctx context.Context, accountID, from, to string, f func(rawEntry) error) error {
	start := "-"
	if from != "" {
		start = "(" + from
	}
	end := "+"
	if to != "" {
		end = to
	}
	for {
		msgs, err := b.rdb.XRangeN(ctx, accounts.LedgerKey(accountID), start, end, ledgerPage).Result()
		if err != nil {
			return fmt.Errorf("read ledger of %s: %w", accountID, err)
		}
		for _, m := range msgs {
			e, err := parseEntry(m)
			if err != nil {
				return err
			}
			if err := f(e); err != nil {
				return err
			}
		}
		if len(msgs) < ledgerPage {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

func archivedFrom(m map[string]string) Archived {
	a := Archived{Through: m["through"]}
	a.Entries, _ = strconv.ParseInt(m["entries"], 10, 64)
	c, _ := strconv.ParseInt(m["credits"], 10, 64)
	a.Credits = credits.Amount(c)
	if ms, _ := strconv.ParseInt(m["at"], 10, 64); ms > 0 {
		a.At = time.UnixMilli(ms).UTC()
	}
	for k, v := range m {
		if u, ok := strings.CutPrefix(k, "unit:"); ok {
			if a.Units == nil {
				a.Units = map[string]int64{}
			}
			a.Units[u], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return a
}

// ArchiveInfo reads an account's archive marker.
func (b *Billing) ArchiveInfo(ctx context.Context, accountID string) (Archived, error) {
	m, err := b.rdb.HGetAll(ctx, archiveKey(accountID)).Result()
	if err != nil {
		return Archived{}, fmt.Errorf("read archive marker of %s: %w", accountID, err)
	}
	return archivedFrom(m), nil
}

// Reconcile checks that an account's balance equals its opening balance
// plus every credit movement of its ledger, archived or not, and that the
// running balance each entry records follows from the one before. Only the
// "credits" unit counts; quota entries are counted in Entries.
//
// It is safe while money moves: the balance, the archive marker and the
// id of the newest entry are read in one MULTI, so they describe one
// moment (every balance change appends its entry in the same script), and
// only entries up to that id are summed. An archive running at the same
// time moves entries from the stream to the marker; Reconcile notices the
// marker changed and starts again.
func (b *Billing) Reconcile(ctx context.Context, accountID string) (*Reconciliation, error) {
	for attempt := 0; ; attempt++ {
		r, again, err := b.reconcileOnce(ctx, accountID)
		if err != nil || !again {
			return r, err
		}
		if attempt == 4 {
			return nil, fmt.Errorf("reconcile %s: the ledger kept being archived while it was read", accountID)
		}
	}
}

func (b *Billing) reconcileOnce(ctx context.Context, accountID string) (*Reconciliation, bool, error) {
	pipe := b.rdb.TxPipeline()
	acct := pipe.HMGet(ctx, accounts.AccountKey(accountID), "id", "balance", "opening_balance")
	marker := pipe.HGetAll(ctx, archiveKey(accountID))
	last := pipe.XRevRangeN(ctx, accounts.LedgerKey(accountID), "+", "-", 1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("reconcile %s: %w", accountID, err)
	}
	v := acct.Val()
	if len(v) != 3 || v[0] == nil {
		return nil, false, ErrAccountNotFound
	}
	r := &Reconciliation{AccountID: accountID, Archived: archivedFrom(marker.Val())}
	bal, err := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	if err != nil {
		return nil, false, fmt.Errorf("reconcile %s: balance %v: %w", accountID, v[1], err)
	}
	r.Balance = credits.Amount(bal)
	openingKnown := v[2] != nil
	if openingKnown {
		o, err := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("reconcile %s: opening balance %v: %w", accountID, v[2], err)
		}
		r.Opening = credits.Amount(o)
	}
	if msgs := last.Val(); len(msgs) > 0 {
		r.Through = msgs[0].ID
	}
	// running is the balance before the next credit entry, as far as the
	// ledger knows; nil until it is known (an inferred opening).
	var running *int64
	if openingKnown {
		x := int64(r.Opening + r.Archived.Credits)
		running = &x
	}
	if r.Through != "" && r.Through != r.Archived.Through {
		err := b.scan(ctx, accountID, r.Archived.Through, r.Through, func(e rawEntry) error {
			r.Entries++
			if e.Unit != "credits" {
				return nil
			}
			r.Ledger += credits.Amount(e.amount)
			if running == nil {
				// Legacy account: the first retained entry says what the
				// balance was before it.
				x := e.after - e.amount
				running = &x
				r.Opening = credits.Amount(x) - r.Archived.Credits
				r.OpeningInferred = true
			}
			if *running+e.amount != e.after {
				r.Breaks = append(r.Breaks, fmt.Sprintf("%s (after %s, expected %s)", e.ID, credits.Amount(e.after), credits.Amount(*running+e.amount)))
			}
			*running = e.after
			return nil
		})
		if err != nil {
			return nil, false, fmt.Errorf("reconcile %s: %w", accountID, err)
		}
	}
	if running == nil { // legacy account and no credit entry retained
		r.Opening = r.Balance - r.Archived.Credits
		r.OpeningInferred = true
	}
	// An archive that ran meanwhile removed entries this read may have
	// missed; read again.
	now, err := b.rdb.HGet(ctx, archiveKey(accountID), "through").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("reconcile %s: %w", accountID, err)
	}
	if now != r.Archived.Through {
		return nil, true, nil
	}
	return r, false, nil
}

// ExportOptions select the entries to export.
type ExportOptions struct {
	// Since exports the entries after this entry id ("": from the oldest
	// entry still in the stream).
	Since string
	// Before exports only entries appended before this time (zero: all).
	// It is compared with the entry id, which is the Redis server's clock
	// when the entry was appended: the stream's order.
	Before time.Time
}

// ExportBatch is one run of consecutive exported entries and their totals,
// the unit an archive deletes in one step.
type ExportBatch struct {
	From    string // id of the entry before the batch ("": none)
	First   string
	Last    string
	Entries int64
	Credits credits.Amount
	Units   map[string]int64
}

// Export is what an export wrote.
type Export struct {
	AccountID string           `json:"account"`
	Entries   int64            `json:"entries"`
	First     string           `json:"first_id,omitempty"`
	Last      string           `json:"last_id,omitempty"`
	Credits   credits.Amount   `json:"credits"`
	Units     map[string]int64 `json:"units,omitempty"`
	// Batches are kept for ArchiveLedger (a few words per thousand
	// entries).
	Batches []ExportBatch `json:"-"`
}

// ExportLedger reads an account's ledger entries selected by opt, oldest
// first, and gives each to write. It returns what was exported, in batches
// ArchiveLedger can delete.
func (b *Billing) ExportLedger(ctx context.Context, accountID string, opt ExportOptions, write func(Entry) error) (*Export, error) {
	if _, err := b.rdb.HGet(ctx, accounts.AccountKey(accountID), "id").Result(); errors.Is(err, redis.Nil) {
		return nil, ErrAccountNotFound
	} else if err != nil {
		return nil, fmt.Errorf("export ledger of %s: %w", accountID, err)
	}
	to := ""
	if !opt.Before.IsZero() {
		ms := opt.Before.UnixMilli()
		if ms <= 0 {
			return &Export{AccountID: accountID}, nil
		}
		to = strconv.FormatInt(ms-1, 10) // every entry of the millisecond before
	}
	x := &Export{AccountID: accountID}
	var cur *ExportBatch
	// prev is the id before the next entry: what the archive marker must
	// say for a batch starting there to be archivable. From the beginning,
	// that is the marker itself (everything up to it is gone already).
	prev := opt.Since
	if prev == "" {
		a, err := b.ArchiveInfo(ctx, accountID)
		if err != nil {
			return nil, err
		}
		prev = a.Through
	}
	err := b.scan(ctx, accountID, opt.Since, to, func(e rawEntry) error {
		if err := write(e.Entry); err != nil {
			return fmt.Errorf("write ledger entry %s: %w", e.ID, err)
		}
		if cur == nil || cur.Entries == archiveBatch {
			x.Batches = append(x.Batches, ExportBatch{From: prev, First: e.ID})
			cur = &x.Batches[len(x.Batches)-1]
		}
		cur.Last, cur.Entries = e.ID, cur.Entries+1
		x.Entries++
		if x.First == "" {
			x.First = e.ID
		}
		x.Last = e.ID
		if e.Unit == "credits" {
			cur.Credits += credits.Amount(e.amount)
			x.Credits += credits.Amount(e.amount)
		} else {
			if cur.Units == nil {
				cur.Units = map[string]int64{}
			}
			if x.Units == nil {
				x.Units = map[string]int64{}
			}
			cur.Units[e.Unit] += e.amount
			x.Units[e.Unit] += e.amount
		}
		prev = e.ID
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// archiveScript deletes one exported batch from the ledger and adds its
// totals to the archive marker, in one step.
// KEYS = ledger, marker. ARGV = from (the marker's expected through, "" for
// none), first, last, entries, credits, now ms, then unit, amount pairs.
// It deletes only when the batch is exactly what the stream holds up to
// last: the marker has not moved (no other archive ran), the oldest entry
// is first, and there are exactly `entries` entries up to last. Then
// XTRIM MINID removes them: entries appended meanwhile have greater ids
// and stay.
// Returns {0, trimmed} done, or {code, detail}: -1 marker moved, -2 stream
// differs from the export.
var archiveScript = redis.NewScript(`
local through = redis.call('HGET', KEYS[2], 'through') or ''
if through ~= ARGV[1] then return {-1, through} end
local n = tonumber(ARGV[4])
local got = redis.call('XRANGE', KEYS[1], '-', ARGV[3], 'COUNT', n + 1)
if #got ~= n or got[1][1] ~= ARGV[2] or got[n][1] ~= ARGV[3] then
  return {-2, tostring(#got)}
end
local ms, seq = string.match(ARGV[3], '^(%d+)-(%d+)$')
local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', ms .. '-' .. (tonumber(seq) + 1))
redis.call('HSET', KEYS[2], 'through', ARGV[3], 'at', ARGV[6])
redis.call('HINCRBY', KEYS[2], 'entries', trimmed)
redis.call('HINCRBY', KEYS[2], 'credits', ARGV[5])
for i = 7, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[2], 'unit:' .. ARGV[i], ARGV[i+1])
end
return {0, tostring(trimmed)}
`)

// ErrArchiveConflict means the ledger changed under an archive in a way
// it must not: another archive ran, or the stream does not hold what was
// exported. Nothing of the batch was deleted.
var ErrArchiveConflict = errors.New("ledger archive conflict")

// ArchiveLedger deletes exactly the entries of x from the ledger, batch
// by batch, each batch with its totals added to the archive marker in the
// same step; the caller must have written and fsynced them first. It only
// archives an export that starts where the archive ends (Since empty or the
// marker's Through). If it stops half-way, the marker says through which
// entry the ledger was archived, and a new export takes up from there.
func (b *Billing) ArchiveLedger(ctx context.Context, x *Export) (archived int64, err error) {
	keys := []string{accounts.LedgerKey(x.AccountID), archiveKey(x.AccountID)}
	for _, bt := range x.Batches {
		if bt.Entries > archiveBatch || bt.Entries <= 0 || !strings.Contains(bt.Last, "-") {
			return archived, fmt.Errorf("archive %s: malformed batch %+v", x.AccountID, bt)
		}
		// The script is not idempotent (it adds totals), so it must run
		// at most once per batch: no automatic retry here (go-redis retries
		// only on network errors before a reply; a lost reply then shows up
		// as a moved marker on the next batch and stops the archive).
		args := []any{bt.From, bt.First, bt.Last, bt.Entries, int64(bt.Credits), b.now().UnixMilli()}
		for u, n := range bt.Units {
			args = append(args, u, n)
		}
		res, err := archiveScript.Run(ctx, b.rdb, keys, args...).Slice()
		if err != nil {
			return archived, fmt.Errorf("archive %s through %s: %w", x.AccountID, bt.Last, err)
		}
		code, _ := res[0].(int64)
		detail, _ := res[1].(string)
		switch code {
		case 0:
			archived += bt.Entries
		case -1:
			return archived, fmt.Errorf("%w: account %s: the archive marker is at %q, the export started after %q (another archive ran; export again)",
				ErrArchiveConflict, x.AccountID, detail, bt.From)
		default:
			return archived, fmt.Errorf("%w: account %s: the stream holds %s entries up to %s where the export read %d from %s",
				ErrArchiveConflict, x.AccountID, detail, bt.Last, bt.Entries, bt.First)
		}
	}
	return archived, nil
}
