// The shell: sign-in, navigation between pages (#hash), and each page's lifecycle.
// A page module exports mount(root, ctx) and may return a function that stops it (timers, streams).

import { HttpError, get, setToken, token } from "./api.js";
import { replace } from "./dom.js";
import overview from "./pages/overview.js";
import sessions from "./pages/sessions.js";
import backends from "./pages/backends.js";
import topics from "./pages/topics.js";
import events from "./pages/events.js";
import permissions from "./pages/permissions.js";
import config from "./pages/config.js";

const PAGES = { overview, sessions, backends, topics, events, permissions, config };
const $ = (id) => document.getElementById(id);

let me = null;
let stop = null;

function showLogin(message) {
  me = null;
  $("nav").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  replace($("main"));
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("token").focus();
}

async function signIn() {
  try {
    me = await get("api/whoami");
  } catch (err) {
    if (err instanceof HttpError && (err.status === 401 || err.status === 403)) {
      const sent = token() !== null;
      setToken(null);
      showLogin(sent ? `Refused: ${err.message}` : "");
      return;
    }
    throw err;
  }
  $("login").hidden = true;
  $("nav").hidden = false;
  $("signout").hidden = me.role === "open";
  $("who").textContent = me.role === "open" ? "open (no auth section)" : `${me.name} · ${me.role}`;
  route();
}

function route() {
  if (!me) return;
  if (stop) stop();
  stop = null;
  const [name, ...rest] = (location.hash.slice(1) || "overview").split("/");
  const page = PAGES[name] || overview;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.getAttribute("href") === `#${name}`);
  const root = $("main");
  replace(root);
  root.dataset.page = name in PAGES ? name : "overview";
  const timers = [];
  const ctx = {
    me,
    arg: rest.map(decodeURIComponent).join("/"),
    // Run fn now and every ms until the page is left; an expired sign-in sends back to the form.
    every(fn, ms) {
      const run = () => fn().catch(failed);
      run();
      timers.push(setInterval(run, ms));
    },
    failed,
  };
  const cleanup = page.mount(root, ctx);
  stop = () => {
    timers.forEach(clearInterval);
    if (typeof cleanup === "function") cleanup();
  };
}

function failed(err) {
  if (err instanceof HttpError && err.status === 401 && me && me.role !== "open") {
    setToken(null);
    showLogin("Signed out: the token is no longer accepted.");
    return;
  }
  console.error(err);
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const input = $("token");
  setToken(input.value.trim());
  input.value = ""; // the token stays in session storage only, never in the page
  signIn();
});
$("signout").addEventListener("click", () => {
  setToken(null);
  if (stop) stop();
  stop = null;
  showLogin("");
});
window.addEventListener("hashchange", route);
signIn();
