// bulkd dashboard: progressive enhancements only. Every page works without
// this script; with it, job progress updates live and copy buttons copy.
(function () {
  "use strict";
  var live = document.getElementById("live");
  function say(msg) { if (live) { live.textContent = msg; } }

  // Copy buttons: <button data-copy="#selector">.
  document.querySelectorAll("[data-copy]").forEach(function (btn) {
    btn.addEventListener("click", function () {
      var el = document.querySelector(btn.getAttribute("data-copy"));
      if (!el) { return; }
      var text = el.textContent.trim();
      var done = function () { btn.textContent = "Copied"; say("Copied to the clipboard"); setTimeout(function () { btn.textContent = "Copy"; }, 2000); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, function () { fallback(el); done(); });
      } else { fallback(el); done(); }
    });
  });
  function fallback(el) {
    var r = document.createRange(); r.selectNodeContents(el);
    var s = window.getSelection(); s.removeAllRanges(); s.addRange(r);
    try { document.execCommand("copy"); } catch (e) { /* the text stays selected */ }
  }

  function fmt(n) { return Number(n).toLocaleString("en-US"); }
  function get(url) {
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } }).then(function (r) {
      if (!r.ok) { throw new Error(r.status); }
      return r.json();
    });
  }
  function setBadge(el, j) {
    if (!el) { return; }
    el.textContent = j.status;
    el.classList.toggle("badge-ok", j.done);
    el.classList.toggle("badge-run", !j.done);
  }

  // Jobs table: poll the account's jobs while any listed one is running.
  var table = document.querySelector("table[data-poll]");
  if (table) {
    var pollTable = function () {
      var running = table.querySelectorAll("tr[data-done=false]");
      if (!running.length) { return; }
      get(table.getAttribute("data-poll")).then(function (data) {
        (data.jobs || []).forEach(function (j) {
          var tr = table.querySelector('tr[data-job-id="' + j.id + '"]');
          if (!tr) { return; }
          tr.setAttribute("data-done", j.done ? "true" : "false");
          setBadge(tr.querySelector("[data-field=status]"), j);
          var p = tr.querySelector("[data-field=progress]"); if (p) { p.value = j.percent; p.textContent = j.percent + "%"; }
          var pc = tr.querySelector("[data-field=percent]"); if (pc) { pc.textContent = j.percent + "%"; }
          var pr = tr.querySelector("[data-field=processed]"); if (pr) { pr.textContent = fmt(j.total_processed); }
        });
        setTimeout(pollTable, 3000);
      }).catch(function () { setTimeout(pollTable, 10000); });
    };
    setTimeout(pollTable, 2000);
  }

  // Job page: poll the job until it completes, then reload once for the
  // results and the summary.
  var job = document.querySelector("[data-poll-job]");
  if (job && job.getAttribute("data-done") !== "true") {
    var pollJob = function () {
      get(job.getAttribute("data-poll-job")).then(function (j) {
        setBadge(document.getElementById("job-status"), j);
        var bar = document.getElementById("job-progress"); if (bar) { bar.value = j.percent; bar.textContent = j.percent + "%"; }
        var t = document.getElementById("job-processed"); if (t) { t.textContent = fmt(j.total_processed); }
        var pc = document.getElementById("job-percent"); if (pc) { pc.textContent = j.percent; }
        if (j.done) { say("The job is complete"); window.location.reload(); return; }
        setTimeout(pollJob, 2000);
      }).catch(function () { setTimeout(pollJob, 10000); });
    };
    setTimeout(pollJob, 1500);
  }
})();
