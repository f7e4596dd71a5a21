// Package browser is the account dashboard's suite in a real browser:
// Debian's Chromium, headless, driven by chromedp (internal/browsertest),
// against a whole standalone bulkd (internal/bulkdtest) and the project's
// mail world for the email families.
package browser

// auditJS checks a page for the accessibility basics and returns what is
// wrong (an empty list when nothing is): a language, one h1, a main
// landmark, a label (or aria-label) on every visible form control, a name
// on every link and button, alt on every image, and a WCAG AA contrast
// ratio (4.5:1, 3:1 for large text) for every element with text of its own
// against the first opaque background behind it. Disabled controls are
// exempt, as WCAG says.
const auditJS = `(() => {
  const problems = [];
  if (!document.documentElement.lang) problems.push('html has no lang');
  const h1 = document.querySelectorAll('h1').length;
  if (h1 !== 1) problems.push(h1 + ' h1 elements');
  if (!document.querySelector('main')) problems.push('no main landmark');
  for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
    const lab = el.id && document.querySelector('label[for="' + el.id + '"]');
    if (!lab && !el.getAttribute('aria-label') && !el.getAttribute('aria-labelledby') && !el.closest('label'))
      problems.push('unlabelled control ' + el.outerHTML.slice(0, 80));
  }
  for (const el of document.querySelectorAll('a, button')) {
    if (!(el.textContent.trim() || el.getAttribute('aria-label') || el.getAttribute('title')))
      problems.push('unnamed ' + el.outerHTML.slice(0, 80));
  }
  for (const img of document.querySelectorAll('img')) if (!img.hasAttribute('alt')) problems.push('img without alt');
  const rgb = s => { const m = s.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const bg = el => { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
    if (c && c.a >= 0.99) return c; } return {r: 255, g: 255, b: 255, a: 1}; };
  const seen = new Set();
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('[disabled], [aria-disabled=true], [hidden]')) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    const cs = getComputedStyle(el);
    if (cs.visibility === 'hidden' || cs.opacity === '0') continue;
    const fg = rgb(cs.color), b = bg(el);
    if (!fg) continue;
    const l1 = lum(fg), l2 = lum(b);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(cs.fontSize), bold = parseInt(cs.fontWeight, 10) >= 700;
    const need = (size >= 24 || (size >= 18.66 && bold)) ? 3 : 4.5;
    const key = el.tagName + cs.color + JSON.stringify(b);
    if (ratio < need && !seen.has(key)) {
      seen.add(key);
      problems.push('contrast ' + ratio.toFixed(2) + ' < ' + need + ': ' + el.tagName.toLowerCase() + ' "' + el.textContent.trim().slice(0, 40) + '" ' + cs.color + ' on rgb(' + b.r + ',' + b.g + ',' + b.b + ')');
    }
  }
  return problems;
})()`
