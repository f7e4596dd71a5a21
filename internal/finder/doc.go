// Package finder finds a person's work address from (first name, last
// name, domain): it writes candidate local parts from the usual address
// patterns and checks them with the SMTP verifier (internal/verify), so a
// found address is one the verifier calls deliverable. It is a library with
// no HTTP in it: the email-lookup family (internal/lookup) calls Find with
// a job's rows, grouped by domain (SPEC 2.7, 4.2, 4.3).
//
// # Answers
//
// Every person gets one Result, in input order:
//
//	status     substatus          when                                                   address  confidence
//	found      verified           a candidate got RCPT 250 on a domain proven not        yes      the verifier's score: 95,
//	                              catch-all (the verifier's deliverable/accepted)                 -10 role, -5 free provider;
//	                                                                                              60 on a disposable domain
//	found      catch_all_pattern  catch-all domain, the address written with the         yes      70
//	                              domain's learned pattern
//	found      catch_all_guess    catch-all domain, no learned pattern: the address      yes      35
//	                              written with the top prior ({first}.{last})
//	not_found  no_match           every candidate was refused (5.1.1, disabled,          no       null
//	                              rejected)
//	not_found  ambiguous          the verified address is also another person's          no       null
//	                              answer in the same call, or 2+ addresses of the
//	                              domain are written another way, or a candidate
//	                              ranked before it got a policy refusal (5.7.1) and
//	                              nothing backs its pattern (see Wrong persons)
//	not_found  no_such_domain     NXDOMAIN                                               no       null
//	not_found  null_mx            MX 0 "." (RFC 7505)                                    no       null
//	not_found  no_mail_server     no MX and no A/AAAA                                    no       null
//	not_found  invalid_domain     the domain cannot be read (see Domains)                no       null
//	not_found  invalid_name       first or last name empty after normalization           no       null
//	not_found  unknown            could not tell: greylisted, dns_error,                 no       null
//	                              connection_failed, timeout, rate limited, smtp
//	                              error, a full mailbox, or the call's ctx ended
//
// Catch-all answers count as found: the row returns an address the client
// can use, with is_catch_all true, a substatus that says how it was chosen
// and a confidence that says how much to trust it (70 when the domain's
// pattern was learned from addresses verified there, 35 for the prior
// guess, roughly the share of companies using {first}.{last}). A guess is
// never "verified". Clients that want proven addresses keep substatus
// verified (or confidence >= 90).
//
// # Wrong persons
//
// A verified mailbox is not always the person's: at a {last}{f} domain
// Thomas Jackson's {first}{l} candidate thomasj@ may be Thomas Jimenez's.
// Four rules keep such an address from being answered:
//
//   - Recheck. When the domain's pattern in use (read from the store, or
//     learned from at least 3 addresses of the call) does not write a
//     person's verified address and its candidates for that person were not
//     sent, the person is reopened: those candidates are tried first; a 250
//     replaces the earlier address (which then teaches nothing), and when all
//     are refused the earlier address stands (with the confidence below).
//   - Provisional patterns. A pattern taught by 1 or 2 addresses of the call
//     (nothing in the store) is provisional: a person it does not write waits
//     instead of being answered no_match, and when a round's refusals of it
//     reach max(2, twice its addresses) the call forgets it and searches the
//     priors again; the addresses that taught it are rechecked once a
//     pattern with more evidence is learned.
//   - Ambiguity. Two people of one call (rows of one lookup shard) verified
//     at the same address are both not_found/ambiguous: the mailbox cannot be
//     both people's and the finder cannot tell whose it is. Rows that are one
//     person written two ways (the same last name, first names equal up to a
//     nickname: Bob and Robert Smith) are not ambiguous.
//   - Unknown before it. A verified address is the person's only when
//     every candidate tried before it (ranked higher: the priors' order,
//     the learned pattern's forms, a recheck's pattern candidates) was
//     refused as non-existent (mailbox_not_found, mailbox_disabled,
//     invalid syntax), or when the domain's pattern backs it: at least one
//     other address of the domain written with its pattern was verified
//     without such doubt (in the call, or counted in the store). Anything
//     else before it (a policy refusal such as "550 5.7.1 Sender blocked",
//     rejected; a block; greylisting; a timeout or a failed connection)
//     leaves the existence of the person's likelier mailbox unknown: the
//     person may be Ronald McDonald, whose ronald.mcdonald@ refuses our
//     sender, and ronald@ Ronald Smith's. Such an address teaches no
//     pattern, counts as no evidence (two colleagues' mailboxes cannot back
//     each other) and, unless backed at the end of the call, is answered
//     not_found/ambiguous, final, after a policy refusal (the refusal is
//     permanent: a retry would say the same), or not_found/unknown after
//     anything else, temporary when that answer was (greylisting: the
//     retry sends the higher candidate again and it tells). The cost: a
//     person whose higher-ranked candidate is refused with 5.7.1 although
//     it does not exist (some servers word "no such user" so) is not
//     found unless colleagues' addresses show the domain's pattern.
//   - Others' policy refusals. A departed person's candidates are all
//     refused as non-existent, and his {first} form may be a colleague's
//     mailbox (ronald@ for Ronald McDonald, Ronald Smith's); when the
//     company's people refuse our sender, that is the only address that
//     accepts. So a verified address is not_found/ambiguous (final) when
//     more people of the domain speak for another pattern than addresses
//     for its own: a person counts for the patterns writing their one
//     policy-refused candidate when all their other sent candidates were
//     refused as non-existent (their own mailbox refusing us; a server
//     that refuses every unknown address with 5.7.1 gives a person several
//     and is not counted); the address's own pattern counts the store's
//     addresses plus the call's others, these only from 3 on (2 colleagues'
//     mailboxes do not back each other). Verified addresses of a domain
//     that gave a policy refusal in the call teach the store only at its
//     end, once answered.
//
// Confidence of a verified address, from the domain's pattern counts (the
// store's at the start of the call plus the addresses verified in it, the
// address itself left out): with a = the addresses of the pattern(s) that
// write it and b = the most addresses of any other pattern,
//
//	a >= b (the domain's usual pattern, or no evidence against it)  the verifier's score (95, -10 role, -5 free)
//	a < b and b = 1                                                 the score - 10 (85)
//	a < b and b >= 2                                                not answered: not_found/ambiguous
//
// The last row is issue 20's wrong person: the pattern's candidate for the
// person was refused (the learned pattern goes first, recheck), and a
// mailbox written another way, against two or more addresses of the
// domain, is more often a colleague's (Ronald McDonald, who left a
// {last}{f} company, and ronaldm@, Ronald Miller's) than the person's
// exception; SMTP cannot tell them apart. The counts of the call are kept
// for this even when the call stops searching with a provisional pattern.
//
// On a greylisting domain people are answered across retries, a few at a
// time (whose candidates passed the greylist first). An address verified
// there while no other address of its pattern is known is held: answered
// not_found/unknown (temporary) while others of the domain wait for a
// retry, and taught to the store only at the end of the call, if
// answered. A colleague's mailbox (leonard@ of a departed Leonard) passes
// the greylist as early as anyone's.
//
// A disposable domain's verified address stays 60.
//
// # Nicknames
//
// A first name that is a common English nickname (nicknames.go: Bob,
// Bill, Liz, Tom, ... about 100 of them, written for bulkd by hand) adds
// its formal names (robert, william, elizabeth, thomas) as further pairs
// with weight 0.3 of the name as given: among the priors robert.smith comes
// after bob.smith and bsmith, and a learned pattern tries bob.smith, then
// robert.smith (MaxLearnedCandidates).
//
// The enrichment fields (email_provider, mx_record, is_catch_all, is_role,
// is_free, is_disposable, confidence) are set only when an address is
// returned, from the verifier's result for that address; otherwise they
// are null. email_provider is "google" or "microsoft" when the MX host
// that answered belongs to them (the verifier's provider), else "other".
//
// Temporary marks answers that may change on a later attempt: greylisting,
// temporary 4xx failures, rate limiting, a 4xx full mailbox, and people
// left unanswered because ctx ended; RetryAfter is the verifier's (the
// server's hint, else 5 minutes for greylisting). dns_error,
// connection_failed, timeout (tarpit) and smtp_error are final, as the
// verifier says. ProbesUsed is the RCPTs sent for the person's candidates
// in this call (a domain's catch-all probe, one per domain, is not
// counted; a repeated person counts on its first row only).
//
// # Names (NormalizeName)
//
//   - Trimmed (white space, zero-width space, BOM, no-break space);
//     invalid UTF-8 becomes a separator; at most 512 runes are read.
//   - Apostrophes (' ` ´ ‘ ’ ʼ ′ ...) and the middle dot are dropped, before
//     NFKC (which would turn ´ into a space): O'Neil -> oneil,
//     D’Souza -> dsouza, Paral·lel -> parallel.
//   - Unicode NFKC (full-width letters, ligatures, compatibility forms),
//     lowercased.
//   - Transliterated letter by letter: a table for letters without a
//     decomposition (ß ss, æ ae, œ oe, ø o, đ/ð d, þ th, ł l, ı i, ...),
//     Cyrillic (BGN/PCGN-like: ж zh, х kh, ц ts, щ shch, ю yu, я ya, hard and
//     soft signs dropped) and Greek (θ th, χ ch, ψ ps); otherwise the
//     canonical decomposition (golang.org/x/text/unicode/norm) without
//     its combining marks (é e, ñ n, ç c, ǅ dz). Stray combining marks and
//     format characters (ZWJ) are dropped without splitting the word.
//   - Anything else (other scripts, punctuation, symbols, white space)
//     separates words. A run of separators containing a hyphen or dash
//     becomes "-", any other run "."; none at the ends.
//
// The result has only [a-z0-9.-], is idempotent and is "" when nothing can
// be written in ASCII (李 -> "", so "李" "王" is invalid_name). A second
// transliteration style writes ä ae, ö/ø oe, ü ue, å aa, æ ae, œ oe
// (German and Nordic companies' habit); it is used for candidates (below),
// never for the normalized name.
//
// # Forms of a name
//
// Words are split at "." and "-". A first name drops leading titles (Dr,
// Mr, Mrs, Ms, Miss, Mx, Prof, Sir, Dame, Herr, Frau, Mme, Mlle) and is
// written, most likely first:
//
//	one word          as is                                   "J." -> j (an initial)
//	hyphenated        joined, hyphenated, first part           annemarie, anne-marie, anne
//	several words     first word, joined, hyphenated           john, johnmichael, john-michael
//
// A last name drops trailing suffixes (Jr, Sr, II, III, IV, PhD, MD, Esq,
// MBA, CPA, DDS) and is written:
//
//	one word               as is                                mcdonald, oneil
//	starts with particles  joined, without particles, hyphenated  vanderberg, berg, van-der-berg
//	hyphenated             joined, hyphenated, first part       smithjones, smith-jones, smith
//	several words          first word, joined, hyphenated       garcia, garciamarquez, garcia-marquez
//
// Particles: van von der den de del della dela la le du des di da dos das
// do ten ter te zu zum zur af av o mac mc ni nic bin ibn ben al el st san
// lo (so "Ó Briain" is obriain, "Mac Donald" macdonald; McDonald and
// MacNeil are one word anyway).
//
// The forms weigh 1, 0.45 and 0.2 by position; a (first, last) pair weighs
// the product, except when both names are compound the same way: then a
// pair of the same kind (both joined, both hyphenated) weighs as its
// heavier form and a mixed pair 0.45 x the product (people write both
// names alike). Pairs in the digraph style (ä ae) follow at 0.45 x, when
// that style writes the name differently; the styles are never mixed
// within a pair (jurgen.muller, juergen.mueller).
//
// # Patterns and candidates (Candidates)
//
// A pattern is a template string; {first} and {last} are a form of the
// names, {f} and {l} their first letters. The known patterns and their
// priors (the share of companies believed to use each, from published
// surveys of company address formats):
//
//	{first}.{last} 0.40   {f}{last} 0.20     {first} 0.10      {first}{last} 0.07
//	{f}.{last} 0.05       {first}{l} 0.03    {first}_{last} 0.025  {last}.{first} 0.02
//	{last}{f} 0.02        {first}-{last} 0.015  {last} 0.01    {last}{first} 0.008
//	{f}_{last} 0.006      {first}.{l} 0.005  {last}_{first} 0.004  {f}-{last} 0.003
//	{f}{l} 0.002
//
// On a domain whose pattern is not known, a person's candidates are every
// (pattern, pair) scored prior x pair weight, best first (ties in prior
// order, then pair order), without repeats and without invalid local parts
// (only [a-z0-9._-], 1..64 octets, no leading, trailing or doubled dot), at
// most MaxCandidates (12). John Smith: john.smith jsmith john johnsmith
// j.smith johns john_smith smith.john smithj john-smith smith smithjohn.
//
// On a domain with a learned pattern, the candidates are that pattern over
// the person's pairs, heaviest first, at most MaxLearnedCandidates (3): one
// RCPT for a plain name, up to three for a compound one (annemarie.oneil,
// anne-marie.oneil, anne.oneil). Nothing else is tried: a person the
// domain's pattern does not find is, in practice, not there.
//
// # The search (Find)
//
// People are deduplicated on (NormalizeName(first), NormalizeName(last),
// domain); a repeat gets the same answer. Names are checked first
// (invalid_name), then the domain (invalid_domain); neither costs a probe.
// People of one domain are resolved and probed together; the learned
// patterns of all the call's domains are read at the start (one pipelined
// round trip with RedisPatterns). The search goes in rounds, and every
// round is ONE Verify call for the whole batch, so the verifier groups all
// the round's candidates by MX host into few pipelined sessions (catch-all
// probe first per domain, politeness shared through Redis). In each round,
// per domain:
//
//   - Learned pattern: every unanswered person sends their next candidate
//     (their learned-pattern forms, one per round).
//   - Unknown pattern, at most 4 unanswered people (smallDomain): in the
//     domain's first round everyone sends their first candidate (the top
//     prior: about 40% of domains are answered in that round, and it
//     tells whether the domain is catch-all); then the scouts go on.
//   - Unknown pattern, more people: only the domain's scouts search, the
//     others wait for the pattern. Scouts: 2 people, chosen by names whose
//     address proves a single pattern (not an initial) first, then the
//     fewest forms, then input order; each sends 4 candidates per round;
//     a scout that runs out is replaced. After 4 scouts ended without
//     teaching the pattern, everyone searches, one candidate per round.
//     A domain of 20 people whose pattern is among the top 4 priors thus
//     costs 8 scout RCPTs and one per other person, a catch-all domain the
//     scouts' first round only, and a domain without mail no RCPT at all.
//   - A verified address that exactly one pattern writes for its person
//     teaches that pattern (PatternStore.Learn) and becomes the domain's
//     pattern for the rest of the call (the pattern with the most verified
//     addresses in this call, ties by prior): the waiting people then get
//     that pattern's candidates, without those already tried. An address
//     several patterns write (an initial: {first} = {f}) teaches nothing.
//   - A stored pattern that two or more people of the domain tried in one
//     round, with none verified, is distrusted for the rest of the call (it
//     may be stale): the domain searches as if no pattern were known.
//
// The verifier's answer for a candidate decides the rest:
//
//	accepted                 the person is found (verified)
//	disposable               found (verified, is_disposable) unless the domain is catch-all
//	catch_all                the domain is catch-all: every unanswered person of it gets
//	                         the catch-all answer (the address of their first candidate,
//	                         sent or not; is_role from the embedded role list when unsent)
//	mailbox_not_found,       refused: the person goes on to the next candidate
//	mailbox_disabled,
//	rejected
//	mailbox_full             not_found/unknown for that person (the mailbox is theirs but
//	                         takes no mail); the others go on
//	no_such_domain, null_mx, every person of the domain: not_found with that substatus,
//	no_mail_server           at once (one DNS answer, no RCPT)
//	anything unknown         every unanswered person of the domain: not_found/unknown with
//	(greylisted, ...)        the verifier's Temporary and RetryAfter; the domain's other
//	                         candidates are not spent in this call
//
// Greylisting: when a domain without a known pattern greylists, its three
// best scouts send all their remaining candidates once, in the next round
// ("priming", at most 3 x 12 RCPTs per domain), so that on the engine's
// retry their candidates are past the greylist and the pattern is learned
// at once; the retry then sends the others their learned-pattern address,
// which may be greylisted in turn. When a domain with a known pattern
// greylists, every person left without an answer sends all their remaining
// forms of the pattern once (at most MaxLearnedCandidates each), so that
// the next retry finds each of them past the greylist whichever form is
// theirs (anne.oneil for Anne-Marie O'Neil is the third). A greylisting
// domain is thus answered within two retries. The verifier keeps each domain's catch-all probe
// address for a day (shared through Redis with Config.Probes), so the probe
// passes on retries too.
//
// The call ends when no domain has anything to send (every round spends
// at least one untried candidate of a bounded list, so a domain needs at
// most about 20 rounds; most need 1 to 3) or when ctx ends; people left
// unanswered then are not_found/unknown, Temporary. Every round opens new
// SMTP sessions, so a domain needing many rounds is paced by the
// limiter's new-sessions-per-second per host.
//
// # Learned patterns (PatternStore)
//
// RedisPatterns keeps one hash per domain, bulkd:finder:pattern:<domain>
// (the canonical domain), field = pattern, value = the number of addresses
// verified with it, across jobs, accounts and processes. Get returns the
// pattern with the highest count (ties by prior; fields that are not known
// patterns are ignored), so one exception cannot displace a pattern many
// addresses confirmed, and a pattern that changed wins once it has more
// verified addresses. Every Learn increments its field and renews the
// key's expiry to PatternTTL (180 days). New with a nil store keeps the
// same counts in the process (at most 100,000 domains). Store errors are
// not fatal: a failed read means no pattern, a failed write is dropped.
//
// # Learning from verification (shapes)
//
// Verification jobs have addresses without names, so their deliverable
// addresses cannot teach a pattern: john.smith@ is {first}.{last} or
// {last}.{first}, jsmith@ any of eight joined patterns. What they can
// teach honestly is the address's shape (shape.go): the separator and
// where the initials are (i.w, w.i, w.w, i_w, w_w, i-w, w-w, joined).
// VerificationTeacher (wired by --finder-learn-from-verification, default
// on) counts it in the domain's hash as field "shape:<shape>", only for
// deliverable/accepted answers that are not catch-all, role, free or
// disposable; everything else teaches nothing. Each address counts once:
// RedisPatterns keeps the counted local parts in a HyperLogLog per domain
// (bulkd:finder:seen:<domain>, 180 days), so a list verified again every
// week adds no evidence. A domain whose counts favour
// one shape (at least 2 addresses, 3 for joined, which generic mailboxes
// like office@ also are; at least twice any other shape) and
// whose pattern is not known has that shape's patterns' priors multiplied
// by 10,000, so they are tried first (in prior order, over the name's
// forms; still at most MaxCandidates): at a {f}.{last} company j.smith is the
// first candidate, not the fifth (TestLearnFromVerification: 5 people,
// 30 RCPTs without the shapes, 5 with them; on the people world, half of
// each domain verified and the other half looked up, 3.02 -> 2.20 RCPTs
// per findable person, docs/benchmarks.md). A shape never makes the
// pattern known: the learned-pattern search (one candidate per person),
// the recheck and the confidence table need an address verified for a
// named person, which the finder then learns as usual.
//
// # Domains
//
// Read as company enrichment reads them (normalize.CanonicalDomain: a URL,
// "www.", "user@", upper case, a trailing dot, IDN -> A-labels), without
// company enrichment's network-host rule (people work at the network's
// own domain too); then the verifier must accept "x@<domain>" (a host
// name, not an IP address or a public suffix). Anything else is
// invalid_domain.
//
// # Performance
//
// BenchmarkFind10k (10,000 people over 500 domains of the people world,
// 50 ms per round trip, 3 sessions per host): about 7.3 s for the whole
// set in one Find with an empty store, 1.41 RCPTs per row (catch-all
// probes included), every findable person found and no wrong address; the
// same rows again from another process: 1.06 RCPTs per row on the domains
// with a learned pattern (probes included), about 4.8 s.
package finder
