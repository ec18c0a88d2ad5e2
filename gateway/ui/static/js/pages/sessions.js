// Sessions of this replica: principal, dialects, era, door, age, in flight, MCPL feature sets, MGP extensions.
import { get } from "../api.js";
import { age, h, replace, table, tags } from "../dom.js";

const COLUMNS = [
  { title: "Session", cell: (s) => h("code", {}, s.id) },
  { title: "Principal", cell: (s) => s.principal },
  { title: "Client", cell: (s) => s.client || "–" },
  { title: "Dialects", cell: (s) => tags(s.dialects) },
  { title: "Era", cell: (s) => s.era },
  { title: "Door", cell: (s) => s.door },
  { title: "View", cell: (s) => s.view },
  { title: "Age", cell: (s) => age(s.age_s), class: "num" },
  { title: "Idle", cell: (s) => age(s.idle_s), class: "num" },
  { title: "In flight", cell: (s) => s.inflight, class: "num" },
  { title: "MCPL feature sets", cell: (s) => (s.mcpl_feature_sets ? tags(s.mcpl_feature_sets) : "–") },
  { title: "MGP extensions", cell: (s) => (s.mgp_extensions ? [s.mgp_version, " ", tags(s.mgp_extensions)] : "–") },
];

export default {
  mount(root, ctx) {
    const body = h("div");
    replace(root, h("h1", {}, "Sessions"), body);
    ctx.every(async () => {
      const data = await get("api/sessions");
      replace(
        body,
        table("sessions-table", COLUMNS, data.sessions, (s) => ({ dataset: { principal: s.principal } }), "no session"),
        h("p", { class: "muted" }, `Sessions held by replica ${data.replica}; ids shortened to 8 characters.`),
      );
    }, 2000);
  },
};
