// Backends: each backend's catalog (tools with security metadata and pin state, prompts, resources);
// a changed tool definition can be approved here (POST /admin/pins/{backend}/{tool}/approve, admin only).
import { get, post } from "../api.js";
import { h, replace, table, tags } from "../dom.js";

function security(s) {
  if (!s) return h("span", { class: "muted" }, "none declared");
  const risk = s.effective_risk_level || s.risk_level;
  return [
    risk ? h("span", { class: `tag risk-${risk}` }, `risk ${risk}`) : null,
    s.permissions_required ? ["needs ", tags(s.permissions_required)] : null,
    s.side_effects ? ["effects ", tags(s.side_effects)] : null,
    s.confirmation_required ? h("span", { class: "tag" }, "confirmation") : null,
    s.reversible === false ? h("span", { class: "tag" }, "irreversible") : null,
  ];
}

function hints(a) {
  if (!a) return "";
  const out = [];
  for (const key of ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]) {
    if (a[key] !== undefined) out.push(`${key.replace("Hint", "")}: ${a[key]}`);
  }
  return tags(out);
}

function pinCell(tool, backend, ctx, reload) {
  const pin = tool.pin || { state: "off" };
  if (pin.state !== "changed") return h("span", { class: `pin-${pin.state}` }, pin.state);
  const approve = h("button", { class: "primary approve-pin", disabled: !ctx.me.may_act }, "Approve");
  approve.addEventListener("click", async () => {
    approve.disabled = true;
    try {
      await post(`/admin/pins/${encodeURIComponent(backend)}/${encodeURIComponent(tool.name)}/approve`, {});
      await reload();
    } catch (err) {
      approve.replaceWith(h("span", { class: "error" }, err.message));
    }
  });
  return [h("span", { class: "pin-changed" }, `changed ${pin.pinned} → ${pin.current} `), approve];
}

async function showDetail(pane, name, ctx) {
  const reload = () => showDetail(pane, name, ctx);
  const d = await get(`api/backends/${encodeURIComponent(name)}`);
  const tools = table(
    "tools-table",
    [
      { title: "Tool", cell: (t) => h("code", {}, t.name) },
      { title: "Description", cell: (t) => t.description || "" },
      { title: "Security", cell: (t) => security(t.security) },
      { title: "Hints", cell: (t) => hints(t.annotations) },
      { title: "Pin", cell: (t) => pinCell(t, name, ctx, reload) },
    ],
    d.catalog.tools,
    (t) => ({ dataset: { tool: t.name } }),
    "no tool (or the backend is not ready)",
  );
  const simple = (id, rows) =>
    table(id, [{ title: "Name", cell: (r) => h("code", {}, r.name) }, { title: "Description", cell: (r) => r.description || "" }], rows);
  replace(
    pane,
    h("h2", { id: "backend-name" }, name),
    h("p", {}, `${d.transport} · ${d.state} · trust ${d.trust_level || "–"} · pinning ${d.pinning} · `, tags(d.dialects)),
    h("h2", {}, `Tools (${d.catalog.tools.length})`),
    tools,
    h("h2", {}, `Prompts (${d.catalog.prompts.length})`),
    simple("prompts-table", d.catalog.prompts),
    h("h2", {}, `Resources (${d.catalog.resources.length})`),
    simple("resources-table", d.catalog.resources),
  );
}

export default {
  mount(root, ctx) {
    const list = h("div", { class: "list", id: "backend-list" });
    const pane = h("div", { id: "backend-detail" }, h("p", { class: "muted" }, "Pick a backend."));
    const changed = h("div", { id: "changed-pins" });
    replace(root, h("h1", {}, "Backends"), changed, h("div", { class: "split" }, list, pane));
    let shown = null;
    ctx.every(async () => {
      const [o, pins] = await Promise.all([get("api/overview"), get("api/pins")]);
      const current = ctx.arg || (o.backends[0] && o.backends[0].name);
      replace(
        list,
        o.backends.map((b) =>
          h("a", { href: `#backends/${encodeURIComponent(b.name)}`, class: b.name === current ? "active" : null, dataset: { name: b.name } }, b.name, " ", h("span", { class: `state-${b.state}` }, b.state)),
        ),
      );
      replace(
        changed,
        pins.pending.length
          ? h("p", { class: "notice" }, `${pins.pending.length} changed tool definition(s) await approval: `, pins.pending.map((p) => `${p.backend}/${p.tool} `))
          : null,
      );
      if (current && current !== shown) {
        shown = current;
        await showDetail(pane, current, ctx);
      }
    }, 5000);
  },
};
