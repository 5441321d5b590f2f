// One confirmation dialog for every change the admin pages make (rollback, revert, promote, stop…):
// nothing that changes what serves everyone happens on a single click.

import { $ } from "./dom.js";

// Resolves to null when cancelled, else the reason typed (or "" when no reason was asked for).
export async function confirmAction({ title, text, yes, reason = null }) {
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-yes").textContent = yes;
  const box = $("confirm-reason-box");
  box.hidden = reason === null;
  if (reason !== null) $("confirm-reason").value = reason;
  const dialog = $("confirm-dialog");
  dialog.returnValue = "";
  dialog.showModal();
  await new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  if (dialog.returnValue !== "yes") return null;
  return reason === null ? "" : $("confirm-reason").value.trim() || reason;
}
