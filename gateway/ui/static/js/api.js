// Talking to the gateway: the token (kept in this tab's sessionStorage), JSON calls and the event stream.
// The token travels only as an Authorization header, never in a URL (URLs end up in logs).

const KEY = "switchboard.token";

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

function headers(extra) {
  const h = { accept: "application/json", ...extra };
  const t = token();
  if (t) h.authorization = `Bearer ${t}`;
  return h;
}

async function answer(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = body && typeof body.error === "string" ? body.error : `HTTP ${response.status}`;
    throw new HttpError(response.status, message);
  }
  return body;
}

// A path relative to the page (/ui/): "api/overview"; absolute paths ("/admin/...") go to the admin API.
export async function get(path) {
  return answer(await fetch(path, { headers: headers(), cache: "no-store" }));
}

export async function post(path, body) {
  const init = { method: "POST", headers: headers({ "content-type": "application/json" }), body: JSON.stringify(body) };
  return answer(await fetch(path, init));
}

// Server-Sent Events over fetch (EventSource cannot send an Authorization header).
// Calls on(eventName, data) for each event; resolves when the stream ends, rejects on HTTP errors.
export async function stream(path, on, signal) {
  const response = await fetch(path, { headers: headers({ accept: "text/event-stream" }), signal, cache: "no-store" });
  if (!response.ok) await answer(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) on(name, JSON.parse(data.join("\n")));
    }
  }
}
