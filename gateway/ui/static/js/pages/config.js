// The effective config, secrets redacted by the gateway ("***"), and the result of the last reload
// (GET /admin/config: admin token).
import { get } from "../api.js";
import { h, replace } from "../dom.js";

function reload(r) {
  if (!r || !r.last_attempt) return h("p", { id: "reload-status", class: "muted" }, "No reload attempted since start.");
  const ok = r.ok === true;
  return h(
    "div",
    { id: "reload-status", class: ok ? "request ok" : "request bad" },
    h("strong", {}, ok ? "Last reload applied" : "Last reload FAILED — the running config was kept"),
    h("div", {}, `attempted ${r.last_attempt}${r.applied_at ? ` · applied ${r.applied_at}` : ""}`),
    r.error ? h("pre", { class: "error" }, r.error) : null,
    r.changes && r.changes.length ? h("div", {}, "Changes: ", r.changes.join(", ")) : null,
  );
}

export default {
  mount(root, ctx) {
    const body = h("div");
    replace(root, h("h1", {}, "Config"), body);
    ctx.every(async () => {
      let data;
      try {
        data = await get("/admin/config");
      } catch (err) {
        const why = err.status === 404 ? "There is no admin API here (auth.admin_token is not set)." : err.status === 401 ? "The config page needs the admin token." : err.message;
        replace(body, h("p", { class: "notice", id: "config-unavailable" }, why));
        return;
      }
      replace(
        body,
        reload(data.reload),
        h("p", {}, "Source: ", h("code", { id: "config-source" }, data.source || "(embedded default)")),
        h("pre", { id: "config-json" }, JSON.stringify(data.config, null, 2)),
      );
    }, 5000);
  },
};
