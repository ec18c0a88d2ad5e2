// Overview: backends (transport, era, dialects, state, restarts, in flight, p50/p99), sessions, topics.
import { get } from "../api.js";
import { card, counts, h, ms, replace, table, tags } from "../dom.js";

const BACKEND_COLUMNS = [
  { title: "Backend", cell: (b) => h("a", { href: `#backends/${encodeURIComponent(b.name)}` }, b.name) },
  { title: "Transport", cell: (b) => b.transport },
  { title: "Era", cell: (b) => b.era || "–" },
  { title: "Dialects", cell: (b) => tags(b.dialects) },
  { title: "State", cell: (b) => h("span", { class: `state-${b.state}` }, b.state), class: "state" },
  { title: "Restarts", cell: (b) => b.restarts, class: "num" },
  { title: "In flight", cell: (b) => b.inflight, class: "num" },
  { title: "Calls", cell: (b) => b.calls, class: "num" },
  { title: "p50", cell: (b) => ms(b.p50_ms), class: "num" },
  { title: "p99", cell: (b) => ms(b.p99_ms), class: "num" },
  { title: "Last error", cell: (b) => (b.error ? h("span", { class: "error" }, b.error) : "") },
];

function reloaded(r) {
  if (!r || r.ok === null || r.ok === undefined) return { text: "none", cls: "muted" };
  return r.ok ? { text: "applied", cls: "ok" } : { text: "FAILED", cls: "bad" };
}

export default {
  mount(root, ctx) {
    const body = h("div");
    replace(root, h("h1", {}, "Overview"), body);
    ctx.every(async () => {
      const o = await get("api/overview");
      const bus = o.bus || {};
      replace(
        body,
        h(
          "div",
          { class: "cards" },
          card("Ready", o.ready ? "yes" : "no", "card-ready"),
          card("Sessions", o.sessions.total, "card-sessions"),
          card("Backends", o.backends.length, "card-backends"),
          card("Topics", o.topics.length, "card-topics"),
          card("Bus", `${bus.kind || "?"}${bus.healthy === false ? " (down)" : ""}`, "card-bus"),
          card("Last reload", h("a", { href: "#config", class: reloaded(o.reload).cls }, reloaded(o.reload).text), "card-reload"),
        ),
        h("h2", {}, "Backends"),
        table("backends-table", BACKEND_COLUMNS, o.backends, (b) => ({ dataset: { name: b.name } }), "no backend"),
        h("p", { class: "muted" }, "Latency since this replica started, all methods (from the request histogram)."),
        h("h2", {}, "Sessions"),
        h(
          "p",
          { id: "session-summary" },
          `By dialect: ${counts(o.sessions.by_dialect)} — by era: ${counts(o.sessions.by_era)} — by door: ${counts(o.sessions.by_door)}`,
        ),
        h("h2", {}, "Topics"),
        table(
          "topics-summary",
          [
            { title: "Topic", cell: (t) => h("a", { href: "#topics" }, t.name) },
            { title: "Participants", cell: (t) => t.participants, class: "num" },
            { title: "Configured", cell: (t) => (t.configured ? "yes" : "no") },
          ],
          o.topics,
          () => ({}),
          "no topic",
        ),
        h("p", { class: "muted" }, `Replica ${o.replica} · ${o.viewers} live-event viewer(s) here · refreshed ${new Date().toLocaleTimeString()}`),
      );
    }, 3000);
  },
};
