// The admin console: one page per part of the self-improving loop, chosen by the URL's #fragment
// (so the back button and a bookmark work). The key is asked for once and kept in this tab only.

import { Api } from "./api.js";
import { $ } from "./dom.js";
import * as evaluations from "./evaluations.js";
import * as experiments from "./experiments.js";
import * as knowledge from "./knowledge.js";
import * as pipeline from "./pipeline.js";
import * as regression from "./regression.js";
import * as review from "./review.js";
import * as timeline from "./timeline.js";

const api = new Api("ragloop.adminKey");
const PAGES = { pipeline, experiments, timeline, regression, knowledge, evaluations, review };
let signedIn = false;

async function signIn(key) {
  api.key = key;
  try {
    await api.get("/v1/pipeline/versions");
  } catch (err) {
    api.key = null;
    throw err.status === 403 ? new Error("this key is not an admin key") : err;
  }
  const keyId = (/^rlk_([0-9a-f]+)_/.exec(key) || [])[1] || "";
  $("who-text").textContent = `admin key ${keyId}`;
  $("who").hidden = false;
  $("signin").hidden = true;
  $("app").hidden = false;
  signedIn = true;
  await route();
}

function signOut() {
  api.key = null;
  signedIn = false;
  $("who").hidden = true;
  $("app").hidden = true;
  $("signin").hidden = false;
  $("key").value = "";
  $("key").focus();
}

function current() {
  const name = location.hash.replace(/^#/, "");
  return Object.hasOwn(PAGES, name) ? name : "pipeline";
}

async function route() {
  if (!signedIn) return;
  const name = current();
  for (const key of Object.keys(PAGES)) {
    $(`page-${key}`).hidden = key !== name;
    const link = document.querySelector(`.tabs a[data-page="${key}"]`);
    if (key === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const title = $(`page-${name}`).dataset.title;
  document.title = `ragloop · admin · ${title}`;
  $("page-status").textContent = `${title} page`;
  try {
    await PAGES[name].show();
  } catch (err) {
    $("page-status").textContent = `${title}: ${err.message}`;
    if (err.status === 401) signOut();
  }
}

function main() {
  for (const page of Object.values(PAGES)) page.init(api);
  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("signin-error").textContent = "";
    try {
      await signIn($("key").value.trim());
    } catch (err) {
      $("signin-error").textContent = `Sign-in failed: ${err.message}`;
    }
  });
  $("sign-out").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  if (api.key) signIn(api.key).catch(signOut);
  else $("signin").hidden = false;
}

main();
