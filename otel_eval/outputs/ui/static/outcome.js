// otel-eval web view: the run page's outcome form (outputs/ui/outcome.py) sent as
// POST /v1/feedback, JSON, from this origin. The only script of the web view: no inline
// code, nothing from elsewhere; what the server answers is shown as text, never as markup.
"use strict";

function say(form, text) {
  form.querySelector("output.status").textContent = text;
}

async function record(form, event) {
  event.preventDefault();
  const chosen = form.querySelector("input[name=outcome]:checked");
  if (!chosen) {
    say(form, "choose success or failure");
    return;
  }
  const headers = {"Content-Type": "application/json"};
  const token = form.querySelector("input.token");
  if (token && token.value) {
    headers.Authorization = "Bearer " + token.value;
  }
  const button = form.querySelector("button");
  button.disabled = true;
  say(form, "recording " + chosen.value + "…");
  try {
    const answer = await fetch(form.dataset.endpoint, {
      method: "POST", headers, credentials: "same-origin", cache: "no-store",
      redirect: "error", referrerPolicy: "no-referrer",
      body: JSON.stringify({trace_id: form.dataset.trace, outcome: chosen.value}),
    });
    if (answer.ok) {
      say(form, "recorded: " + chosen.value);
      if (token) {
        token.value = "";
      }
      window.location.reload();
      return;
    }
    let why = answer.statusText;
    try {
      why = (await answer.json()).error || why;
    } catch (e) {
      // not JSON: keep the status text
    }
    say(form, "not recorded (" + answer.status + "): " + String(why).slice(0, 300));
  } catch (e) {
    say(form, "not recorded: " + String(e).slice(0, 300));
  }
  button.disabled = false;
}

for (const form of document.querySelectorAll("form.outcome")) {
  form.addEventListener("submit", (event) => record(form, event));
  form.querySelector("button").disabled = false;  // enabled once submitting goes through here
}
