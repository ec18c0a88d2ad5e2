// Building the page. Everything from the gateway is set as text (textContent), never parsed as HTML:
// tool descriptions and names come from backends and are untrusted.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

// columns: [{title, cell(row) -> node|text, class?}], rows: objects; rowAttrs(row) -> attributes of the <tr>.
export function table(id, columns, rows, rowAttrs = () => ({}), empty = "nothing to show") {
  const head = h("tr", {}, columns.map((c) => h("th", {}, c.title)));
  const body = rows.length
    ? rows.map((row) => h("tr", rowAttrs(row), columns.map((c) => h("td", { class: c.class }, c.cell(row)))))
    : [h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, empty))];
  return h("table", { id }, h("thead", {}, head), h("tbody", {}, body));
}

export function tags(values) {
  return (values || []).map((v) => h("span", { class: "tag" }, v));
}

export function card(label, value, id) {
  return h("div", { class: "card", id }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
}

export function ms(value) {
  return value === null || value === undefined ? "–" : `${value} ms`;
}

export function age(seconds) {
  if (seconds < 60) return `${Math.round(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${Math.round(seconds % 60)}s`;
  return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
}

export function counts(object) {
  const entries = Object.entries(object || {});
  return entries.length ? entries.map(([k, v]) => `${k} ${v}`).join(" · ") : "none";
}
