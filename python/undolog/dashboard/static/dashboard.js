// UndoLog dashboard: live updates and deadline countdowns. No framework, no build step.
// The server renders every fragment (escaped there); this only swaps it in.
"use strict";

function remember(root) {
  const kept = {};
  root.querySelectorAll("input, textarea, select").forEach((el) => {
    if (!el.id) return;
    kept[el.id] = el.type === "checkbox" ? el.checked : el.value;
  });
  const focused = document.activeElement && document.activeElement.id;
  return { kept, focused };
}

function restore(root, state) {
  for (const [id, value] of Object.entries(state.kept)) {
    const el = document.getElementById(id);
    if (!el || !root.contains(el)) continue;
    if (el.type === "checkbox") el.checked = value; else if (el.type !== "hidden") el.value = value;
  }
  if (state.focused) {
    const el = document.getElementById(state.focused);
    if (el) el.focus();
  }
}

function span(seconds) {
  const h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  return (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s";
}

function countdowns() {
  const now = Date.now();
  document.querySelectorAll("[data-requested]").forEach((el) => {
    el.textContent = span(Math.max(0, Math.round((now - Date.parse(el.dataset.requested)) / 1000))) + " old";
  });
  document.querySelectorAll("[data-expires]").forEach((el) => {
    const left = Math.round((Date.parse(el.dataset.expires) - now) / 1000);
    if (left <= 0) { el.textContent = "expired"; el.classList.add("late"); return; }
    el.textContent = "expires in " + span(left);
  });
}

// Times arrive in UTC (readable without this script); show them in the viewer's zone.
const LOCAL = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
  second: "2-digit", hourCycle: "h23", timeZoneName: "short",
});

function localTime(date) {
  const part = {};
  for (const p of LOCAL.formatToParts(date)) part[p.type] = p.value;
  return `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second} ${part.timeZoneName}`;
}

function localTimes(root) {
  root.querySelectorAll("time[datetime]:not([data-local])").forEach((el) => {
    const date = new Date(el.getAttribute("datetime"));
    if (Number.isNaN(date.getTime())) return;
    el.title = el.textContent;
    el.textContent = localTime(date);
    el.dataset.local = "1";
  });
  // A call's history is one text block of lines that each begin with a UTC time.
  root.querySelectorAll("pre.history:not([data-local])").forEach((el) => {
    el.textContent = el.textContent.replace(
      /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)/gm,
      (whole, day, time) => {
        const date = new Date(`${day}T${time}Z`);
        return Number.isNaN(date.getTime()) ? whole : localTime(date);
      });
    el.title = "times in your time zone";
    el.dataset.local = "1";
  });
}

function viewerZone() {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (!zone) return;
  document.querySelectorAll("input.viewer-tz").forEach((el) => { if (!el.value) el.value = zone; });
}

function wireSelectAll() {
  const all = document.getElementById("select-all");
  if (!all) return;
  all.addEventListener("change", () => {
    document.querySelectorAll("input.pick").forEach((box) => { box.checked = all.checked; });
  });
}

// After a swap, the fragment's buttons and links take no click for a moment: a new request
// or a decided one moves the rows, and a click aimed at what was there must not land on
// the row that moved under the pointer (reject is one click). A person needs longer than
// this to see the new rows and aim again. The keyboard is not held: focus stays on the
// same element, by its id (restore).
const SETTLE_MS = 400;

function settle(root) {
  clearTimeout(root.settleTimer);
  root.dataset.settling = "1";
  root.settleTimer = setTimeout(() => { delete root.dataset.settling; },
                                Number(root.dataset.settleMs) || SETTLE_MS);
}

function live() {
  const root = document.getElementById("live");
  if (!root || !window.EventSource) return;
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const response = await fetch(root.dataset.fragment, { credentials: "same-origin" });
      if (response.status === 401 || response.redirected) { window.location = "/login"; return; }
      if (response.ok) {
        // The body is read first: what the person types while it arrives is remembered
        // too (no await between remember and restore, so no keystroke falls between).
        const html = await response.text();
        const state = remember(root);
        root.innerHTML = html;
        settle(root);
        restore(root, state);
        wireSelectAll();
        countdowns();
        localTimes(root);
        root.dataset.refreshed = String(Date.now());
      }
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }
  const url = root.dataset.events + "&since=" + encodeURIComponent(root.dataset.since || "");
  const source = new EventSource(url);
  // A page whose updates stopped says so: a frozen page would look live and current.
  function stopped(text, withLogin, state) {
    source.close();
    root.dataset.live = state || "stopped";
    if (document.getElementById("live-status")) return;
    const note = document.createElement("p");
    note.id = "live-status";
    note.className = "flash error";
    note.setAttribute("role", "alert");
    note.textContent = text + " ";
    if (withLogin) {
      const link = document.createElement("a");
      link.href = "/login";
      link.textContent = "Log in again";
      note.appendChild(link);
    }
    root.parentNode.insertBefore(note, root);
  }
  source.addEventListener("change", refresh);
  source.addEventListener("logout", () => { source.close(); window.location = "/login"; });
  source.addEventListener("lost", () => stopped(
    "Your connection to the database was closed (the server ended it or restarted): " +
    "this page no longer updates.", true));
  // The dashboard refuses a stream when too many live pages are open (429: this person's;
  // 503: the whole dashboard's, or all agent logins'). An EventSource reads no refusal,
  // so the stream is asked for once more with fetch, which does: the page then says why
  // and refreshes itself every Retry-After seconds instead, so it stays current. A stream
  // that opens for that fetch (a place came free) is let go at once: a reload makes it
  // the page's own.
  async function refused() {
    const ask = new AbortController();
    let response = null, text = "";
    try {
      response = await fetch(url, { credentials: "same-origin", signal: ask.signal });
      if (response.status === 429 || response.status === 503) text = await response.text();
    } catch (e) {
      response = null;
    } finally {
      ask.abort();
    }
    if (response && response.status === 401) { window.location = "/login"; return; }
    if (!text) { stopped("Live updates stopped. Reload the page.", false); return; }
    const seconds = Math.max(1, Number(response.headers.get("retry-after")) || 30);
    stopped(`Live updates refused: ${text}. This page refreshes itself every ${seconds} s ` +
            "instead; reload it to try live updates again.", false, "polling");
    setInterval(refresh, seconds * 1000);
  }
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) refused();
  };
  root.dataset.live = "connecting";
  source.onopen = () => { root.dataset.live = "open"; };
}

async function counts() {
  const box = document.getElementById("counts");
  if (!box || !box.dataset.fragment) return;
  const response = await fetch(box.dataset.fragment, { credentials: "same-origin" });
  if (response.ok) box.innerHTML = await response.text();
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  viewerZone();
  counts();
  wireSelectAll();
  countdowns();
  setInterval(countdowns, 1000);
  live();
});
