// Document upload (admin keys) with the background job's progress.

import { $, clear, el } from "./dom.js";

const POLL_MS = 700;

export function setupUpload(api, defaultCollection) {
  const form = $("upload-form");
  const status = $("upload-status");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const files = $("upload-files").files;
    const collection = $("upload-collection").value.trim() || defaultCollection() || "default";
    if (!files.length) return;
    const data = new FormData();
    for (const f of files) data.append("files", f, f.name);
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    clear(status).append(el("p", { text: `Uploading ${files.length} file${files.length > 1 ? "s" : ""}…` }));
    try {
      const job = await api.post(`/v1/collections/${encodeURIComponent(collection)}/documents`, data);
      await follow(api, job, status);
      form.reset();
    } catch (err) {
      const message =
        err.status === 403
          ? "Uploading documents needs an admin key. Sign out and sign in with one " +
            "(ragloop keys create --role admin), or ask an administrator."
          : `Upload refused: ${err.message}`;
      clear(status).append(el("p", { class: "error", role: "alert", text: message }));
    } finally {
      button.disabled = false;
    }
  });
}

async function follow(api, job, status) {
  const bar = el("progress", { max: "1", value: "0", "aria-label": "Ingest progress" });
  const line = el("p", { class: "job-line" });
  clear(status).append(
    el("p", { text: `Ingesting ${job.documents.join(", ")} (job ${String(job.job_id).slice(0, 8)}…)`, title: job.job_id }),
    bar,
    line,
  );
  for (;;) {
    const p = job.progress || {};
    bar.value = job.status === "succeeded" ? 1 : Number(p.fraction) || 0;
    const phase = p.phase ? `${p.phase} ${p.done}/${p.total}` : "";
    line.textContent = `${job.status}${phase ? ` · ${phase}` : ""}`;
    if (job.status === "succeeded") {
      const r = job.result || {};
      const n = job.documents.length;
      line.textContent = `Done: ${n} document${n === 1 ? "" : "s"} added to “${job.collection}”` +
        (r.chunks_total !== undefined ? ` (${r.chunks_total} chunk${r.chunks_total === 1 ? "" : "s"} in all)` : "") +
        `. Ask about ${n === 1 ? "it" : "them"} with the collection set to “${job.collection}”.`;
      line.classList.add("ok-text");
      return;
    }
    if (job.status === "failed") {
      line.textContent = `Failed: ${job.error || "unknown error"}`;
      line.classList.add("error");
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    job = await api.get(`/v1/jobs/${encodeURIComponent(job.job_id)}`);
  }
}
