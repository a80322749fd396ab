// The attention page: POST /v1/translate with attention (when the model has it), list the translations, draw the clicked one's
// attention as a table (source pieces across, target pieces down) and its n-best list. No libraries.
// ?q=LINE (repeatable), &model=ID and &show=K translate on load and open translation K: a link to a sentence.
"use strict";

const $ = (id) => document.getElementById(id);
const attends = {}; // model id -> whether it has attention to show (RNNencdec has none)
let results = [];

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

async function loadModels(wanted) {
  const models = await (await fetch("v1/models")).json();
  for (const m of models) {
    attends[m.id] = m.attention;
    const option = new Option(`${m.id}: ${m.name}${m.attention ? "" : " (no attention)"}`, m.id);
    $("model").add(option);
  }
  if (wanted !== null) $("model").value = wanted;
}

async function translate() {
  const sentences = $("source").value.split("\n").map((s) => s.trim()).filter((s) => s);
  if (!sentences.length) return;
  setStatus("translating…");
  const body = {
    model: Number($("model").value),
    sentences,
    nbest: Number($("nbest").value) || 1,
    attention: attends[$("model").value],
  };
  const started = performance.now();
  const response = await fetch("v1/translate", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) {
    setStatus(answer.error || response.statusText, true);
    return;
  }
  results = answer.translations;
  const list = $("translations");
  list.replaceChildren();
  results.forEach((result, index) => {
    const item = document.createElement("li");
    item.dataset.index = index;
    const best = result.candidates.length ? result.candidates[0].text : "";
    item.append(best);
    const source = document.createElement("span");
    source.className = "source";
    source.textContent = result.source;
    item.append(source);
    item.addEventListener("click", () => show(index));
    list.append(item);
  });
  setStatus(`${results.length} translated in ${Math.round(performance.now() - started)} ms`);
}

function show(index) {
  const result = results[index];
  if (!result) return;
  document.querySelectorAll("#translations li").forEach((li) => {
    li.classList.toggle("selected", Number(li.dataset.index) === index);
  });
  $("detail").hidden = false;
  const none = attends[$("model").value] ? "(an empty line)" : "(this model has no attention)";
  $("heatmap").replaceChildren(result.attention ? heatmap(result.attention) : none);
  const nbest = $("nbest-list");
  nbest.replaceChildren();
  for (const candidate of result.candidates) {
    const item = document.createElement("li");
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = candidate.score.toFixed(3);
    item.append(score, candidate.text);
    nbest.append(item);
  }
}

function heatmap(attention) {
  const table = document.createElement("table");
  table.className = "attention";
  const head = table.createTHead().insertRow();
  head.append(document.createElement("th"));
  for (const piece of attention.source) {
    const th = document.createElement("th");
    th.textContent = piece;
    head.append(th);
  }
  const body = table.createTBody();
  attention.weights.forEach((row, i) => {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.textContent = attention.target[i];
    tr.append(th);
    row.forEach((weight, j) => {
      const td = tr.insertCell();
      td.style.background = `rgba(20, 60, 160, ${weight.toFixed(3)})`;
      td.title = `${attention.target[i]} ← ${attention.source[j]}: ${weight.toFixed(3)}`;
    });
  });
  return table;
}

async function start() {
  const params = new URLSearchParams(location.search);
  try {
    await loadModels(params.get("model"));
  } catch (error) {
    setStatus(`cannot list the models: ${error}`, true);
    return;
  }
  $("form").addEventListener("submit", (event) => {
    event.preventDefault();
    translate().catch((error) => setStatus(String(error), true));
  });
  const lines = params.getAll("q");
  if (lines.length) {
    $("source").value = lines.join("\n");
    try {
      await translate();
    } catch (error) {
      setStatus(String(error), true);
      return;
    }
    if (params.has("show")) show(Number(params.get("show")));
  }
}

start();
