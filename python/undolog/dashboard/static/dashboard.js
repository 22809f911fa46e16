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

function wireSelectAll() {
  const all = document.getElementById("select-all");
  if (!all) return;
  all.addEventListener("change", () => {
    document.querySelectorAll("input.pick").forEach((box) => { box.checked = all.checked; });
  });
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
        const state = remember(root);
        root.innerHTML = await response.text();
        restore(root, state);
        wireSelectAll();
        countdowns();
        root.dataset.refreshed = String(Date.now());
      }
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }
  const url = root.dataset.events + "&since=" + encodeURIComponent(root.dataset.since || "");
  const source = new EventSource(url);
  source.addEventListener("change", refresh);
  source.addEventListener("logout", () => { source.close(); window.location = "/login"; });
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
  counts();
  wireSelectAll();
  countdowns();
  setInterval(countdowns, 1000);
  live();
});
