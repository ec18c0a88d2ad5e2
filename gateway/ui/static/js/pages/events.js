// Live events: a tail of the audit stream (every decision: who, what, where, allowed or denied and why)
// and of the MCPx envelopes routed in topics, from every replica. Filters apply to what is kept here
// (the last KEEP events); pause holds new ones.
import { stream } from "../api.js";
import { h, replace, table } from "../dom.js";

const KEEP = 1000;
const SHOWN = 300;
const FILTERS = ["principal", "backend", "method"];

const COLUMNS = [
  { title: "Time", cell: (e) => h("span", { class: "mono" }, (e.ts || "").slice(11, 23)) },
  { title: "Principal", cell: (e) => e.principal || "–" },
  { title: "Action", cell: (e) => h("code", {}, e.action || e.method || (e.tool ? `tool ${e.tool}` : "")) },
  { title: "Backend", cell: (e) => e.backend || (e.topic ? `topic ${e.topic}` : "–") },
  { title: "Outcome", cell: (e) => h("span", { class: `outcome-${e.outcome}` }, e.outcome + (e.result && e.result !== "ok" ? ` (${e.result})` : "")) },
  { title: "Reason", cell: (e) => e.reason || "" },
  { title: "Duration", cell: (e) => (e.latency_ms !== undefined ? `${e.latency_ms} ms` : ""), class: "num" },
  { title: "Replica", cell: (e) => h("span", { class: "muted" }, e.replica || "") },
];

export default {
  mount(root, ctx) {
    const kept = [];
    const waiting = []; // arrived while paused
    let paused = false;
    let held = 0;
    let lost = 0;
    const inputs = Object.fromEntries(FILTERS.map((f) => [f, h("input", { id: `filter-${f}`, placeholder: f, size: 14 })]));
    const outcome = h("select", { id: "filter-outcome" }, h("option", { value: "" }, "any outcome"), h("option", { value: "allowed" }, "allowed"), h("option", { value: "refused" }, "refused (not allowed)"));
    const pause = h("button", { id: "pause" }, "Pause");
    const status = h("span", { id: "stream-status", class: "muted" }, "connecting…");
    const notes = h("span", { id: "stream-notes", class: "warn" });
    const body = h("div");
    replace(root, h("h1", {}, "Live events"), h("div", { class: "toolbar" }, Object.values(inputs), outcome, pause, status, notes), body);

    const matches = (e) =>
      FILTERS.every((f) => !inputs[f].value || String(e[f] || "").toLowerCase().includes(inputs[f].value.toLowerCase())) &&
      (!outcome.value || (outcome.value === "allowed" ? e.outcome === "allowed" : e.outcome !== "allowed"));

    const draw = () => {
      const rows = [];
      for (let i = kept.length - 1; i >= 0 && rows.length < SHOWN; i--) if (matches(kept[i])) rows.push(kept[i]);
      replace(body, table("events-table", COLUMNS, rows, (e) => ({ class: "event", dataset: { outcome: e.outcome } }), "no event yet"));
      notes.textContent = [held ? `${held} new while paused` : "", lost ? `${lost} event(s) lost: this view fell behind` : ""].filter(Boolean).join(" · ");
    };
    for (const el of [...Object.values(inputs), outcome]) el.addEventListener("input", draw);
    pause.addEventListener("click", () => {
      paused = !paused;
      pause.textContent = paused ? "Resume" : "Pause";
      if (!paused) {
        waiting.splice(0).forEach(keep);
        held = 0;
      }
      draw();
    });

    const keep = (e) => {
      kept.push(e);
      if (kept.length > KEEP) kept.shift();
    };
    let timer = null;
    const redraw = () => {
      if (!timer) timer = setTimeout(() => ((timer = null), draw()), 150); // at most ~7 redraws a second
    };
    const abort = new AbortController();
    const connect = async () => {
      while (!abort.signal.aborted) {
        try {
          await stream("api/events", (name, data) => {
            if (name === "hello") status.textContent = `live (replica ${data.replica})`;
            else if (name === "dropped") lost += data.count;
            else if (name === "audit" && !paused) keep(data);
            else if (name === "audit") {
              waiting.push(data);
              if (waiting.length > KEEP) waiting.shift();
              held += 1;
            }
            if (!paused) redraw();
            else notes.textContent = `${held} new while paused`;
          }, abort.signal);
          status.textContent = "stream ended; reconnecting…";
        } catch (err) {
          if (abort.signal.aborted) return;
          status.textContent = `disconnected (${err.message}); retrying…`;
          if (err.status === 401) return ctx.failed(err);
        }
        await new Promise((resolve) => setTimeout(resolve, 2000));
      }
    };
    draw();
    connect();
    return () => {
      abort.abort();
      clearTimeout(timer);
    };
  },
};
