// MCPx topics: participants and their capabilities; promote/demote through the admin API
// (POST /admin/participants/{id}/capabilities {add, remove}: lasts as long as the connection).
import { get, post } from "../api.js";
import { h, replace, table, tags } from "../dom.js";

function actions(p, ctx, refresh) {
  if (!ctx.me.may_act) return h("span", { class: "muted" }, "admin only");
  const pattern = h("input", { placeholder: "capability pattern, e.g. mcp/request:tools/*", size: 32, class: "pattern" });
  const result = h("span", { class: "result" });
  const send = (key) => async () => {
    const value = pattern.value.trim();
    if (!value) return;
    try {
      await post(`/admin/participants/${encodeURIComponent(p.id)}/capabilities`, { [key]: [value] });
      result.textContent = key === "add" ? `granted ${value}` : `removed ${value}`;
      pattern.value = "";
      await refresh(true);
    } catch (err) {
      result.textContent = err.message;
      result.className = "result error";
    }
  };
  return [pattern, " ", h("button", { class: "promote", onclick: send("add") }, "Promote"), " ", h("button", { class: "demote danger", onclick: send("remove") }, "Demote"), " ", result];
}

export default {
  mount(root, ctx) {
    const body = h("div");
    replace(root, h("h1", {}, "Topics"), body);
    let editing = false;
    const refresh = async (force) => {
      if (editing && !force) return; // never redraw under a person typing a pattern
      editing = false;
      const data = await get("api/topics");
      replace(
        body,
        data.topics.length ? null : h("p", { class: "muted" }, "No topic (mcpx.topics in config, or opened by participants)."),
        data.topics.map((t) => [
          h("h2", {}, `${t.name} (${t.participants})`),
          table(
            `topic-${t.name}`,
            [
              { title: "Participant", cell: (p) => h("code", {}, p.id) },
              { title: "Capabilities", cell: (p) => tags(p.capabilities) },
              { title: "Mode", cell: (p) => p.mode || "all" },
              { title: "Promote / demote", cell: (p) => actions(p, ctx, refresh) },
            ],
            t.roster,
            (p) => ({ dataset: { participant: p.id } }),
            "no participant",
          ),
        ]),
      );
    };
    body.addEventListener("focusin", () => (editing = true));
    body.addEventListener("focusout", () => (editing = false));
    ctx.every(() => refresh(false), 3000);
  },
};
