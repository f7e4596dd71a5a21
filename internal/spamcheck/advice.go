package spamcheck

import "strings"

// advice are plain-language fixes for SpamAssassin rules that content
// (rather than the sending infrastructure) commonly triggers. An entry
// ending in "*" matches every rule with that prefix. Rules not listed get
// their own description (Advice).
var advice = []struct{ rule, text string }{
	{"MIME_HTML_ONLY", "Add a plain-text version next to the HTML (send both as multipart/alternative: pass text and html)."},
	{"MPART_ALT_DIFF*", "Make the plain-text and HTML versions say the same thing: the text part differs a lot from the HTML."},
	{"HTML_IMAGE_ONLY_*", "Add real text: the HTML is almost only images, which is how spam hides its words from filters."},
	{"HTML_IMAGE_RATIO_*", "Use fewer or smaller images, or more text: the image-to-text ratio is typical of spam."},
	{"HTML_SHORT_LINK_IMG_*", "Do not send a short HTML part that is mostly a linked image: add text that says what the image says."},
	{"HTML_FONT_LOW_CONTRAST", "Do not use text colours close to the background: it reads as hidden text."},
	{"HTML_FONT_SIZE_TINY*", "Do not use tiny fonts: they read as hidden text."},
	{"HTML_FONT_SIZE_HUGE", "Use normal font sizes: huge fonts are typical of spam."},
	{"HTML_OBFUSCATE_*", "Write words plainly: HTML entities or tags inside words look like filter evasion."},
	{"HTML_MIME_NO_HTML_TAG", "Wrap the HTML part in <html> ... </html>."},
	{"HTML_TAG_BALANCE_*", "Close every HTML tag you open (html, body, head): unbalanced markup is typical of spam tools."},
	{"HTML_EXTRA_CLOSE", "Remove stray closing tags from the HTML."},
	{"MISSING_SUBJECT", "Add a subject."},
	{"EMPTY_MESSAGE", "Add a body: the message has no text."},
	{"SUBJ_ALL_CAPS", "Do not write the subject in capital letters."},
	{"SUBJ_EXCLAIM*", "Use fewer exclamation marks in the subject."},
	{"UPPERCASE_*", "Write less of the body in capital letters."},
	{"DEAR_*", "Greet the recipient by name instead of a generic \"Dear ...\"."},
	{"FREEMAIL_*", "Send from an address at your own domain, not at a free mail provider."},
	{"FROM_EXCESS_BASE64", "Use a plain display name in From (no encoded or unusual characters)."},
	{"LOTS_OF_MONEY", "Avoid large sums of money in the text."},
	{"MONEY_*", "Avoid talking about large sums of money, especially next to requests for personal details."},
	{"US_DOLLARS_*", "Avoid large dollar amounts in the text."},
	{"ADVANCE_FEE_*", "Remove phrases typical of advance-fee fraud (transfers, beneficiaries, sums held for you)."},
	{"FILL_THIS_FORM*", "Do not ask for personal details (names, addresses, bank data) in the email; link to your site instead."},
	{"T_FILL_THIS_FORM*", "Do not ask for personal details (names, addresses, bank data) in the email; link to your site instead."},
	{"FORM_FRAUD*", "Do not ask for personal details next to promises of money."},
	{"DRUGS_*", "Remove mentions of prescription drugs."},
	{"DIET_*", "Remove weight-loss claims."},
	{"GUARANTEED_*", "Tone down guarantees (\"100% guaranteed\", \"risk free\")."},
	{"URG_BIZ", "Tone down urgency about a business opportunity."},
	{"UNCLAIMED_MONEY", "Remove claims about unclaimed money."},
	{"PDS_*", "Check the links and sender details: the message looks like a known phishing or spam pattern."},
	{"BODY_SINGLE_URI", "Add text around the link: a message that is little more than one link looks like spam."},
	{"BODY_SINGLE_WORD", "Add text: a message of a single word or a link looks like spam."},
	{"HTML_SHORT_LENGTH", "Add text: very short HTML messages with links look like spam."},
	{"SHORT_SHORTNER", "Link to your own domain instead of a URL shortener."},
	{"SHORTENED_URL_*", "Link to your own domain instead of a URL shortener."},
	{"URI_NOVOWEL", "Link to domains with readable names."},
	{"TVD_*", "Reword the phrases it names: they are typical of spam campaigns."},
	{"TO_NO_BRKTS_*", "Address recipients as \"Name <address>\" in To."},
	{"MSGID_*", "Let your mail system generate Message-ID headers (this one looks forged)."},
	{"MISSING_MID", "Add a Message-ID header (your mail system should)."},
	{"MISSING_DATE", "Add a Date header (your mail system should)."},
	{"MISSING_FROM", "Add a From header."},
	{"MISSING_HEADERS", "Add a To header."},
	{"CTE_8BIT_MISMATCH", "Declare 8-bit content correctly (Content-Transfer-Encoding) or encode it as quoted-printable."},
	{"MIME_QP_LONG_LINE", "Keep quoted-printable lines at most 76 characters long."},
	{"MIME_BASE64_TEXT", "Send text parts as quoted-printable or 7-bit rather than base64."},
	{"CHARSET_FARAWAY*", "Send in the character set of your recipients' language."},
}

// Advice says what to change for a rule that fired.
func Advice(rule, description string) string {
	for _, a := range advice {
		if p, ok := strings.CutSuffix(a.rule, "*"); ok {
			if strings.HasPrefix(rule, p) {
				return a.text
			}
		} else if rule == a.rule {
			return a.text
		}
	}
	// SpamAssassin descriptions name the area first ("BODY: ...").
	d := description
	for _, area := range []string{"BODY:", "HTML:", "URI:", "RAW:", "HEADER:", "HDR:"} {
		if rest, ok := strings.CutPrefix(d, area); ok {
			d = strings.TrimSpace(rest)
			break
		}
	}
	if d == "" {
		return "Rework what SpamAssassin's rule " + rule + " looks for."
	}
	return "Rework what this rule found: " + d
}
