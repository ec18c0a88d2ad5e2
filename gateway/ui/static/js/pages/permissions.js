// MGP permission requests waiting for an operator (mgp.permission_policy: interactive), from every replica.
// Answered through the admin API: POST /admin/mgp/permissions/{id} {grants: {permission: approved|denied}}.
import { get, post } from "../api.js";
import { h, replace } from "../dom.js";

function request(r, ctx, refresh) {
  const boxes = (r.permissions || []).map((p) => h("input", { type: "checkbox", checked: true, value: p, class: "grant" }));
  const result = h("span", { class: "result" });
  const answer = (approveChecked) => async () => {
    const grants = Object.fromEntries(boxes.map((b) => [b.value, approveChecked && b.checked ? "approved" : "denied"]));
    try {
      await post(`/admin/mgp/permissions/${encodeURIComponent(r.request_id)}`, { grants });
      await refresh(true);
    } catch (err) {
      result.textContent = err.message;
      result.className = "result error";
    }
  };
  const may = ctx.me.may_act;
  return h(
    "div",
    { class: "request", dataset: { request: r.request_id, server: r.server_id } },
    h("div", {}, h("strong", {}, r.server_id), " asks for:"),
    boxes.map((b) => h("label", { class: "perm" }, b, " ", h("code", {}, b.value), " ")),
    h("div", { class: "muted" }, `request ${r.request_id} · since ${r.created_at || "?"} · expires ${r.expires_at || "?"}`),
    may
      ? h("div", { class: "toolbar" }, h("button", { class: "primary approve", onclick: answer(true) }, "Grant checked"), h("button", { class: "danger deny", onclick: answer(false) }, "Deny all"), result)
      : h("p", { class: "muted" }, "Answering needs the admin token."),
  );
}

export default {
  mount(root, ctx) {
    const body = h("div", { id: "permission-requests" });
    const done = h("p", { id: "answered", class: "ok" });
    replace(root, h("h1", {}, "Permissions"), done, body);
    let busy = false;
    const refresh = async (answered) => {
      if (busy) return;
      busy = true;
      try {
        const data = await get("api/permissions");
        if (answered) done.textContent = "Answer sent to the backend.";
        replace(
          body,
          data.pending.length
            ? data.pending.map((r) => request(r, ctx, refresh))
            : h("p", { class: "muted", id: "no-requests" }, "No permission request waits for an operator."),
        );
      } finally {
        busy = false;
      }
    };
    ctx.every(() => refresh(false), 3000);
  },
};
