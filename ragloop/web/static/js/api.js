// The JSON API with the key from this tab's sessionStorage, sent as a bearer header (never in a URL).

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
  }
}

export class Api {
  constructor(storageName) {
    this.storageName = storageName;
  }

  get key() {
    return sessionStorage.getItem(this.storageName);
  }

  set key(value) {
    if (value) sessionStorage.setItem(this.storageName, value);
    else sessionStorage.removeItem(this.storageName);
  }

  headers(extra = {}) {
    const h = { ...extra };
    if (this.key) h.Authorization = `Bearer ${this.key}`;
    return h;
  }

  async request(method, path, body) {
    const init = { method, headers: this.headers(), credentials: "omit", cache: "no-store" };
    if (body instanceof FormData) {
      init.body = body;
    } else if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, `the server cannot be reached (${err.message})`);
    }
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = text;
    }
    if (!resp.ok) throw new ApiError(resp.status, describe(resp.status, data));
    return data;
  }

  get(path) { return this.request("GET", path); }
  post(path, body) { return this.request("POST", path, body); }
  del(path) { return this.request("DELETE", path); }

  // POST /v1/query?stream=true: calls onEvent(name, data) for each Server-Sent Event.
  async stream(path, body, onEvent) {
    let resp;
    try {
      resp = await fetch(path, {
        method: "POST",
        headers: this.headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
        body: JSON.stringify(body),
        credentials: "omit",
        cache: "no-store",
      });
    } catch (err) {
      throw new ApiError(0, `the server cannot be reached (${err.message})`);
    }
    if (!resp.ok) {
      const text = await resp.text();
      let data = text;
      try { data = JSON.parse(text); } catch { /* plain text */ }
      throw new ApiError(resp.status, describe(resp.status, data));
    }
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const ev = parseEvent(block);
        if (ev) onEvent(ev.name, ev.data);
      }
    }
  }
}

function parseEvent(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return null;
  try {
    return { name, data: JSON.parse(data.join("\n")) };
  } catch {
    return { name, data: data.join("\n") };
  }
}

function describe(status, data) {
  const detail = data && typeof data === "object" ? data.detail : data;
  const text = typeof detail === "string" ? detail : detail ? JSON.stringify(detail) : "";
  if (status === 401) return `the key was not accepted: ${text || "sign in again"}`;
  if (status === 403) return text || "this needs an admin key";
  if (status === 429) return `too many requests for this key: ${text}`;
  return text || `HTTP ${status}`;
}
